"""Search: cost model, simulator, exact ILP, optuna tuner and peer baselines."""
