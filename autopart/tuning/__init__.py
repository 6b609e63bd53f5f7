"""`autopart tune` and `autopart bench`: profile, search, verify by running, report, save."""
