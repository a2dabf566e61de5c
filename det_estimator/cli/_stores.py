"""The store commands: ``store describe`` (its id, where it is) and ``store detach`` (a copy made its own)."""

import argparse
import sys

from det_estimator.orchestration import command_on, print_json
from det_estimator.store import SCHEMA_VERSION, ExperimentStore


def describe(store: ExperimentStore, args: argparse.Namespace) -> int:
    """The store's file, id, schema version and files folder, and whether it is a copy of another."""
    if args.json:
        print_json(
            {
                "path": store.home,
                "store_id": store.store_id,
                "schema_version": SCHEMA_VERSION,
                "files_dir": str(store.files_dir),
                "copy_of": None if store.copy_of is None else str(store.copy_of),
            },
            sys.stdout,
        )
        return 0
    print(f"store:           {store.home}")
    print(f"id:              {store.store_id}")
    print(f"schema version:  {SCHEMA_VERSION}")
    print(f"its files:       {store.files_dir}")
    if store.copy_of is not None:
        print(f"a copy of:       {store.copy_of} (read-only until `{command_on(store.location)} store detach`)")
    return 0


def detach(store: ExperimentStore, args: argparse.Namespace) -> int:
    """Makes a copy of a store (or a store meeting another's folders) a store of its own."""
    report = store.detach()
    if args.json:
        print_json(report, sys.stdout)
        return 0
    print(f"The store {report.path} is store {report.new_id} now (it was store {report.old_id}).")
    for source, target in report.copied:
        print(f"  copied {source} to {target}")
    for folder in report.claimed:
        print(f"  claimed {folder}")
    if report.checkpoints_gone:
        print(
            f"  {len(report.checkpoints_gone)} checkpoint(s) it listed were gone (deleted by the other store), "
            f"now recorded as deleted: {', '.join(report.checkpoints_gone)}"
        )
    return 0
