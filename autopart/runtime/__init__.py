"""Execution of graphs and plans on real targets."""

from autopart.runtime.executor import Executor, RunResult
from autopart.runtime.feeds import random_inputs, validate_feeds

__all__ = ["Executor", "RunResult", "random_inputs", "validate_feeds"]
