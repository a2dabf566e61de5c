"""The store commands: ``describe`` (its id, where it is), ``detach`` (a copy made its own), ``copy``, ``upgrade``."""

import argparse
import sys

from det_estimator.orchestration import command_on, print_json
from det_estimator.store import SCHEMA_VERSION, ExperimentStore, StoreLocation, copy_store


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


def copy(source: StoreLocation, destination: StoreLocation, args: argparse.Namespace) -> int:
    """Copies every record of the store ``source`` into ``destination``, new or empty, which takes over its folders."""
    with ExperimentStore(source, create=False) as store:
        report = copy_store(store, destination)
    if args.json:
        print_json(report, sys.stdout)
        return 0
    print(f"Copied the store {report.source} into the store {report.destination} (store {report.destination_id}):")
    width = max(len(copied.table) for copied in report.tables)
    for copied in report.tables:
        print(f"  {copied.table:<{width}}  {copied.rows:>10,} rows")
    print(f"  logs: {len(report.logs_copied)} folder(s) copied into the files folder of {report.destination}")
    if report.folders_moved:
        print(
            f"The experiments' checkpoint folders belong to {report.destination} now: {report.source} no longer writes "
            "or deletes there (it refuses to resume these experiments; run them from the copy, or give the original "
            f"copies of its own with `{command_on(source)} store detach`)."
        )
        for folder in report.folders_moved:
            print(f"  moved {folder}")
    for folder, owner in report.folders_left:
        print(f"  left {folder}: it belongs to a third store, {owner}")
    return 0


def upgrade(store: ExperimentStore, args: argparse.Namespace) -> int:
    """Says what opening the store for ``store upgrade`` did: upgraded it from an older schema, or nothing."""
    schema = store.schema
    if args.json:
        print_json(
            {
                "path": store.home,
                "from_version": schema.from_version,
                "to_version": schema.to_version,
                "upgraded": schema.upgraded,
            },
            sys.stdout,
        )
        return 0
    if schema.upgraded:
        print(f"Upgraded the store {store.home} from schema version {schema.from_version} to {schema.to_version}.")
    else:
        print(
            f"The store {store.home} is at schema version {schema.to_version}, this det-estimator's: nothing to "
            "upgrade."
        )
    return 0
