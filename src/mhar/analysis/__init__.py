"""What the routers learned: the disagreement probe, per-head routing maps, reports."""

from mhar.analysis.capture import Site, capture_sites, source_columns
from mhar.analysis.probe import ProbeResult, probe_model, probe_sites

__all__ = ["Site", "capture_sites", "source_columns", "ProbeResult", "probe_model", "probe_sites"]
