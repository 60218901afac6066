"""What the routers learned: the disagreement probe, per-head routing maps, reports.

See docs/analysis.md. The CLI: ``mhar probe RUN``, ``mhar maps RUN``, ``mhar report RUN...``.
"""

from mhar.analysis.capture import Site, capture_sites, source_columns
from mhar.analysis.maps import RoutingMap, plot_map, routing_map
from mhar.analysis.probe import ProbeResult, probe_model, probe_sites
from mhar.analysis.report import build_report

__all__ = ["Site", "capture_sites", "source_columns", "RoutingMap", "plot_map", "routing_map", "ProbeResult",
           "probe_model", "probe_sites", "build_report"]
