"""The papers' experiments, one module each, run by ``keyshift simulate --scenario NAME``.

Each module exposes ``add_arguments(parser)`` (optional) and ``run(args) -> dict`` returning
the JSON summary; it prints its markdown tables and writes its plots into the report folder.
"""

from __future__ import annotations

SCENARIOS: dict[str, str] = {
    "dlb": "keyshift.experiments.dlb",
    "elb-clb": "keyshift.experiments.elb_clb",
    "blocking-rate": "keyshift.experiments.blocking_rate",
    "elastic": "keyshift.experiments.elastic",
}
