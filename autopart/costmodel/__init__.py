"""The cost model: measurements in, prices out.

Everything that turns what the profiler measured into the seconds a search compares lives
here, one concern a module:

- :mod:`~autopart.costmodel.costs`: :class:`Costs`, the only thing a search reads, and
  :class:`TransferModel`;
- :mod:`~autopart.costmodel.from_profile`: a measurement table to :class:`Costs`;
- :mod:`~autopart.costmodel.op_costs`: per-node prices from op signatures;
- :mod:`~autopart.costmodel.fusion`: what a consumer fused into its producer costs;
- :mod:`~autopart.costmodel.cuts`: what cutting a model into partitions costs, and cold entry;
- :mod:`~autopart.costmodel.cold`: how a cold entry scales with idle time;
- :mod:`~autopart.costmodel.calibration`: scaling op sums by measured subgraphs;
- :mod:`~autopart.costmodel.alone`: what a library's defaults change for a plan's only
  partition;
- :mod:`~autopart.costmodel.transfer`: fitting copy times between devices;
- :mod:`~autopart.costmodel.measurements`: what all of them read.
"""

from autopart.costmodel.costs import Costs, TransferModel
from autopart.costmodel.from_profile import costs_from_profile, profile_targets, transfer_fits
from autopart.costmodel.measurements import Measurement, MeasurementTable
from autopart.costmodel.transfer import TransferFit, fit_transfer

__all__ = [
    "Costs",
    "Measurement",
    "MeasurementTable",
    "TransferFit",
    "TransferModel",
    "costs_from_profile",
    "fit_transfer",
    "profile_targets",
    "transfer_fits",
]
