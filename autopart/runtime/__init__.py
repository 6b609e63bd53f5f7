"""Execution of graphs and plans on real targets."""

from autopart.ir.feeds import random_inputs, validate_feeds
from autopart.runtime.executor import Executor, RunResult

__all__ = ["Executor", "RunResult", "random_inputs", "validate_feeds"]
