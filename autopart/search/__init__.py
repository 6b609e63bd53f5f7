"""Search: simulator, exact ILP, optuna search, peer baselines and the planner over them."""
