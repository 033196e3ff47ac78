"""``keyshift state upgrade RUN_ID``: rewrite a run's durable engine state, pickled by a
keyshift before issue 26, in the current data-only format (docs/operators.md, "State codec").

    keyshift state upgrade prod                          # lists what needs it; reads no pickle
    keyshift state upgrade prod --trust-pickled-state    # converts those files
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from keyshift.cli import UsageError
from keyshift.config import load_config
from keyshift.run_ids import run_id_arg

SUMMARY = "upgrade a run's durable engine state from the old pickled format"

FLAG = "--trust-pickled-state"


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "state", help=SUMMARY,
        description="A run's durable engine state (<warehouse>/_engine_state/<run>/engine-*/ "
        "base and changelog files).",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    u = actions.add_parser(
        "upgrade", help="rewrite the run's pickled state files in the current format",
        description="Rewrite the base and changelog files of a run's engines that an older "
        "keyshift wrote with pickle in the current, data-only format, encoded by the run's "
        f"operator's state codec. Reading them unpickles them, which runs whatever code the "
        f"files name: only with {FLAG}, for state whose every writer you trust. Without it "
        "nothing is unpickled and the files that need it are listed (exit status 2).",
    )
    u.add_argument("run_id", metavar="RUN_ID", type=run_id_arg,
                   help="the run (see `keyshift status`)")
    u.add_argument(FLAG, dest="trust", action="store_true",
                   help="unpickle the old files (only if nobody else could have written them)")
    u.add_argument("--app", help="the run's operator, whose state_codec encodes the state "
                   "(default: the shipped or installed operator <home>/runs/RUN_ID/job.json "
                   "names, never a module path it holds; else the default codec)")
    u.add_argument("--json", action="store_true", help="print one JSON object")
    u.set_defaults(func=run)
    return p


def _codec(typed: str | None, recorded: Any) -> tuple[Any, str]:
    """The codec of the operator named on the command line (``--app``, a spec the person
    typed, imported as ``keyshift run`` would), else of the one the run's job.json records,
    looked up among the operators this host knows without importing what it names: a
    file someone else could write never chooses a module to import."""
    from keyshift.apps.registry import known_operator, resolve_operator
    from keyshift.apps.state_codec import DEFAULT_CODEC

    if typed:
        cls = resolve_operator(typed).cls  # a bad spec: one line naming app
        return cls.state_codec, f"{typed}'s codec"
    if not recorded:
        return DEFAULT_CODEC, "the default codec"
    known = known_operator(recorded)
    if known is None:
        raise UsageError(f"the run's job.json names operator {str(recorded)[:200]!r}, which is "
                         "not a shipped operator or an installed entry point on this host; "
                         "pass --app to name it")
    return known.state_codec, f"{recorded}'s codec"


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)  # ConfigError: the CLI's one-line message
    from keyshift.streaming.engine_state import StateFormatError, upgrade

    from keyshift.streaming.runs import run_meta

    job = run_meta(cfg.run_dir(args.run_id))
    uri = job.get("engine_state") or cfg.engine_state_uri(args.run_id)
    codec, codec_name = _codec(args.app, job.get("app"))
    try:
        found = upgrade(uri, codec, trust_pickled_state=args.trust)
    except StateFormatError as exc:
        raise UsageError(str(exc)) from None
    if not found.current and not found.pickled:
        raise UsageError(f"no engine state files of run {args.run_id!r} under {uri}")
    if found.pickled and not args.trust:
        raise UsageError(
            f"{len(found.pickled)} engine state file(s) of run {args.run_id!r} are pickled by "
            f"an older keyshift (e.g. {found.pickled[0]}); reading them runs any code they "
            f"name, so pass {FLAG} only if nobody else could have written {uri}")
    result = {"run_id": args.run_id, "engine_state": uri, "codec": codec_name,
              "converted": len(found.converted), "already_current": len(found.current)}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"run {args.run_id}: {len(found.converted)} engine state file(s) converted with "
              f"{codec_name}, {len(found.current)} already current ({uri})")
    return 0
