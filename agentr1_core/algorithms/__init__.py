"""RL algorithms: advantage estimators and policy losses as pure tensor functions."""
