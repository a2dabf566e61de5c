"""The job commands: ``job run`` (batch inference on N slots), ``job list`` and ``job logs``."""

import argparse
import sys
from pathlib import Path
from typing import Callable

from det_estimator.cli._entrypoint import EntrypointError, check_program
from det_estimator.cli._experiments import (
    UsageError,
    check_config_file,
    check_context_dir,
    check_slots_fit_this_machine,
)
from det_estimator.cli._output import format_time, print_log, print_table
from det_estimator.orchestration import command_on, print_json
from det_estimator.orchestration._jobs import JobConfigError, load_job_config, run_job
from det_estimator.orchestration._processes import device_type
from det_estimator.orchestration._report import failure_place_and_text
from det_estimator.store import ExperimentStore, LogOwner, State, to_json_value


def run(open_store: Callable[[], ExperimentStore], args: argparse.Namespace) -> int:
    """Runs a job config's script on its slots in the foreground, recorded in the store.

    The store is opened (made, at a new path) only once the job config is accepted.
    """
    from det_estimator.config import ConfigError
    from det_estimator.config._source import read_source

    context_dir = check_context_dir(args.config, args.context_dir, "job run")
    check_config_file(args.config, context_dir)
    try:
        spec = load_job_config(read_source(args.config), default_name=Path(args.config).stem, slots=args.slots)
    except (ConfigError, JobConfigError) as error:
        raise UsageError(f"{args.config}: {error}") from error
    check_slots_fit_this_machine(spec.slots, "resources.slots", hosts_option=False)
    scripts = [word for word in spec.command if word.endswith(".py")]
    if scripts and not (Path(scripts[0]).is_absolute() or (context_dir / scripts[0]).is_file()):
        raise UsageError(f"The job's command runs {scripts[0]}, which is not in CONTEXT_DIR {context_dir}.")
    try:
        check_program(
            context_dir, list(spec.command), spec.environment.variables_for(device_type()), "The job's command"
        )
    except EntrypointError as error:
        raise UsageError(f"{args.config}: {error}") from error
    shown = sys.stderr if args.json else sys.stdout
    with open_store() as store:
        print(f"Running job {spec.name!r} on {spec.slots} slot(s): {' '.join(spec.command)}", file=shown, flush=True)
        job = run_job(store, spec, str(context_dir), stream=shown, verbose=args.verbose).job
        # A command pasted into the same shell must find this store: with its --store unless it is the default.
        command = command_on(store.location)
    if args.json:
        print_json(job, sys.stdout)
    else:
        print(f"Job {job.id} {job.state} (exit status {job.exit_status}); its output: {command} job logs {job.id}")
    if job.state != State.COMPLETED:
        # As a failed trial's: where, and the root cause with the user's own frames.
        place, text = failure_place_and_text(job.error or {})
        print(f"Job {job.id} failed{place}:\n{text}", file=sys.stderr)
        return 1
    return 0


def list_jobs(store: ExperimentStore, args: argparse.Namespace) -> int:
    """Every job: id, name, kind, state, slots, times, exit status."""
    jobs = store.jobs()
    if args.json:
        print_json([to_json_value(job) for job in jobs], sys.stdout)
        return 0
    if not jobs:
        print(f"No jobs yet in {store.location}.")
        return 0
    rows = [
        [
            job.id,
            job.name,
            job.kind,
            job.state,
            job.slots,
            format_time(job.created_at),
            format_time(job.ended_at),
            "-" if job.exit_status is None else job.exit_status,
        ]
        for job in jobs
    ]
    print_table(["ID", "NAME", "KIND", "STATE", "SLOTS", "CREATED", "ENDED", "EXIT"], rows)
    return 0


def job_logs(store: ExperimentStore, args: argparse.Namespace) -> int:
    """Everything a job's processes printed."""
    return print_log(store, LogOwner.job(store.job(args.job_id).id))
