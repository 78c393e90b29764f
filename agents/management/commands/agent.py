"""`manage.py agent "goal"`: run an agent to completion and print its trace."""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
import uuid
from contextlib import nullcontext

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents import errors
from agents.api.serializers import RunDetailSerializer
from agents.models import Run, RunStatus, Step
from agents.permissions import can_decide
from agents.runconfig.options import RUN_LIMITS
from agents.runs import drive, live, review, selectors, submit
from agents.usage import prices, quotas


class Command(BaseCommand):
    help = "Run an agent on a goal and print its trace (Thought / Action / Observation / Final Answer)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("input", help="the goal, e.g. 'What is 12*7, plus 1?'")
        parser.add_argument("--provider", default=None, help="demo, openai, anthropic, xai, huggingface, openrouter")
        parser.add_argument("--model", default=None)
        parser.add_argument("--protocol", choices=["tools", "react"], default=None)
        parser.add_argument("--agent", default=None, help="start from this agent's configuration (see the admin)")
        parser.add_argument("--max-turns", type=int, default=None, help="default: the agent's, or 8")
        parser.add_argument("--timeout", type=float, default=None, help="seconds; default: the agent's, or 60")
        parser.add_argument("--user", default="admin", help="the run's owner (default: admin)")
        parser.add_argument("--json", action="store_true", help="print the run object with its steps")
        parser.add_argument(
            "--no-stream",
            action="store_true",
            help="on a terminal, print each step once it is stored instead of the model's words as they come",
        )
        thread = parser.add_mutually_exclusive_group()
        thread.add_argument("--thread", metavar="ID", default=None, help="continue this thread of the --user")
        thread.add_argument(
            "--new-thread", action="store_true", help="start a thread (titled from the input) to continue later"
        )
        decide = parser.add_mutually_exclusive_group()
        decide.add_argument("--approve", action="store_true", help="approve sensitive tool calls")
        decide.add_argument("--deny", action="store_true", help="deny sensitive tool calls")

    def handle(self, *args, **opts) -> None:
        logger = logging.getLogger("agents")
        level = logger.level
        logger.setLevel(logging.WARNING)  # the trace is the output; JSON logs would drown it
        try:
            self._handle(opts)
        finally:
            logger.setLevel(level)  # in-process callers (call_command) keep their own logging

    def _handle(self, opts) -> None:
        for flag, name, unit in (("max_turns", "max_turns", ""), ("timeout", "timeout_s", " seconds")):
            low, high = RUN_LIMITS[name]  # the bounds a run body has (agents/runconfig/options.py)
            if opts[flag] is not None and not low <= opts[flag] <= high:
                raise CommandError(f"--{flag.replace('_', '-')} must be between {low} and {high}{unit}.", returncode=2)
        if not opts["input"].strip() or len(opts["input"]) > settings.AGENT_MAX_INPUT_CHARS:
            raise CommandError(f"The input must have 1 to {settings.AGENT_MAX_INPUT_CHARS} characters.", returncode=2)
        if opts["thread"] is not None and opts["new_thread"]:  # argparse refuses the pair; call_command(**kw) does not
            raise CommandError("Use either --thread or --new-thread, not both.", returncode=2)
        user = self._user(opts["user"])
        self.live = Terminal(self.stdout) if self._streams(opts) else None
        started = time.monotonic()
        with live.also_to(self.live) if self.live is not None else nullcontext():
            run = self._start(user, opts)
            run = self._drive(run, user, opts)
        if opts["json"]:
            self.stdout.write(json.dumps(RunDetailSerializer(run).data, indent=2, default=str))
        else:
            self._summary(run, time.monotonic() - started)
        if not run.ok:
            sys.exit(1)

    def _streams(self, opts) -> bool:
        """The model's words as they come: on a terminal, unless --json or --no-stream."""
        return not (opts["json"] or opts["no_stream"]) and self.stdout.isatty()

    def _user(self, username: str):
        try:
            return get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist:
            if username != "admin":  # named with --user: say only that it is missing
                raise CommandError(f"No user '{username}'.", returncode=2) from None
            raise CommandError(
                f"No user '{username}'. Run 'make run' (or '.venv/bin/python manage.py ensure_admin') first, "
                "or pass --user.",
                returncode=2,
            ) from None

    def _start(self, user, opts) -> Run:
        return self._start_run(user, opts, self._thread_id(opts["thread"]), new_thread=opts["new_thread"])

    def _thread_id(self, value: str | None) -> uuid.UUID | None:
        if value is None:
            return None
        try:
            return uuid.UUID(value)
        except ValueError:
            raise CommandError(f"--thread takes a thread id (a UUID), not {value!r}.", returncode=2) from None

    def _start_run(self, user, opts, thread_id: uuid.UUID | None, new_thread: bool = False) -> Run:
        options = submit.RunOptions(
            input=opts["input"],
            mode="step",
            protocol=opts["protocol"],
            provider=opts["provider"],
            model=opts["model"],
            max_turns=opts["max_turns"],
            timeout_s=opts["timeout"],
            thread_id=thread_id,
            agent=opts["agent"],
        )
        try:  # a new thread and its first run start together: a run that cannot start leaves no empty thread
            return submit.start_run(owner=user, options=options, new_thread=new_thread)
        except quotas.QuotaExceeded as exc:
            raise CommandError(str(exc), returncode=2) from None
        except errors.InvalidRequest as exc:
            if "thread_id" in exc.detail:
                raise CommandError(
                    f"User '{user.get_username()}' has no thread {thread_id}. Start one with --new-thread.",
                    returncode=2,
                ) from None
            messages = [m for msgs in exc.detail.values() for m in msgs]
            raise CommandError(" ".join(messages), returncode=2) from None
        except errors.ThreadBusy as exc:
            raise CommandError(f"Thread {thread_id}: {exc.detail}", returncode=2) from None

    def _drive(self, run: Run, user, opts) -> Run:
        printed = 0
        while True:
            printed = self._print_new(run, printed, opts["json"])
            try:
                next_run = self._step(run, user, opts)
            except (errors.RunFinished, errors.RunBusy):
                next_run = Run.objects.get(pk=run.pk)  # cancelled or taken over meanwhile: show where it stands
                if next_run.status == run.status and next_run.status != RunStatus.DONE:
                    self.stderr.write(f"Run {run.pk} is being advanced elsewhere; leaving it there.")
                    return next_run
            if next_run is None or next_run.status == RunStatus.DONE:
                final = next_run or Run.objects.get(pk=run.pk)
                self._print_new(final, printed, opts["json"])
                return final
            run = next_run

    def _step(self, run: Run, user, opts) -> Run | None:
        """One move: advance a running run, or decide a paused one; None means stop here."""
        if run.status == RunStatus.RUNNING:
            return drive.execute(run_id=run.pk, units=drive.ONE_STEP)
        if run.status == RunStatus.AWAITING_APPROVAL:
            if not can_decide(user, run):
                self.stderr.write(
                    f"Run {run.pk} is awaiting approval; '{user.get_username()}' may not decide approvals "
                    "(that needs the agents.review_run permission). Decide in the admin."
                )
                return None
            approved = self._ask(run, opts)
            if approved is None:
                return None
            return review.decide_approval(run_id=run.pk, actor=user, approved=approved, reason="decided on the CLI")
        return None

    def _ask(self, run: Run, opts) -> bool | None:
        pending = selectors.pending_action(run) or {}
        if opts["approve"] or opts["deny"]:
            return bool(opts["approve"])
        if not sys.stdin.isatty():
            self.stderr.write(
                f"Run {run.pk} is awaiting approval of {pending.get('tool')} {json.dumps(pending.get('arguments'))}; "
                "no terminal to ask on. Pass --approve or --deny, or decide in the admin."
            )
            return None
        answer = input(f"Allow {pending.get('tool')} with {json.dumps(pending.get('arguments'))}? [y/n] ")
        return answer.strip().lower() in {"y", "yes"}

    def _print_new(self, run: Run, printed: int, quiet: bool) -> int:
        steps = list(Step.objects.filter(run=run, index__gte=printed).order_by("index"))
        if not quiet:
            if self.live is not None:
                self.live.erase()  # what was shown as it came is now in the steps below
            for step in steps:
                self.stdout.write(format_step(step))
        return printed + len(steps)

    def _summary(self, run: Run, seconds: float) -> None:
        thread = f" · thread {run.thread_id}" if run.thread_id else ""
        cost = prices.cost_text(run.cost_nanos)
        spent = f" · cost: {cost} {settings.AGENT_CURRENCY}" if cost is not None else ""  # when a price is known
        self.stdout.write(
            f"Stop reason: {run.stop_reason or run.status} · turns: {run.turns}{spent} · time: {seconds:.2f} s · "
            f"run {run.pk}" + thread
        )
        if run.error:
            self.stdout.write(f"Error: {run.error}")
        if run.thread_id:
            self.stdout.write(f"Continue this conversation with: --thread {run.thread_id}")


def format_step(step: Step) -> str:
    """One step as the classic ReAct trace."""
    data, lines = step.data, []
    if step.kind == "model":
        if data.get("thought"):
            lines.append(f"Thought: {data['thought']}")
        for call in data.get("tool_calls") or []:
            lines += [f"Action: {call['name']}", f"Action Input: {json.dumps(call['arguments'])}"]
        if data.get("final_answer") is not None:
            lines.append(f"Final Answer: {data['final_answer']}")
    elif step.kind == "tool":
        label = "Observation (error)" if data.get("is_error") else "Observation"
        lines.append(f"{label}: {data.get('output')}")
    elif step.kind == "approval":
        verdict = "approved" if data.get("approved") else "denied"
        lines.append(f"Approval: {data.get('name')} {verdict} by {data.get('reviewer')}")
    elif step.kind == "summary":  # history "summarize": the thread's earlier turns condensed
        if data.get("summary") is None:
            lines.append(f"Summary of earlier turns failed ({data.get('error')}): they are left out")
        else:
            lines.append(f"Summary of the thread's first {data.get('runs')} runs: {data['summary']}")
    else:
        lines.append(f"Error: {data.get('message')}")
    return "\n".join(lines)


class Terminal:
    """The CLI's live sink: the model's words as they are written and a line per running tool, erased once the
    unit's steps are printed (they say the same, as stored)."""

    def __init__(self, out) -> None:
        self.out, self.shown, self.column = out, 0, 0  # lines written (and the current one's width) since the erase

    def text(self, turn: int, text: str) -> None:
        self._write(text)

    def retry(self, turn: int) -> None:
        self.erase()
        self._write("(the model call is retried)\n")

    def tool_started(self, call_id: str, tool: str, arguments: dict) -> None:
        if self.column:
            self._write("\n")
        self._write(f"… {tool} is running\n")

    def tool_finished(self, call_id: str, tool: str, is_error: bool, latency_ms: int) -> None:
        return None

    def _write(self, text: str) -> None:
        width = max(shutil.get_terminal_size().columns, 1)
        for line in text.split("\n")[:-1]:
            self.shown += 1 + (self.column + len(line)) // width
            self.column = 0
        self.column += len(text.split("\n")[-1])
        self.out.write(text, ending="")
        self.out.flush()

    def erase(self) -> None:
        """Take back what was shown: up to its first line, and clear from there."""
        if not (self.shown or self.column):
            return
        width = max(shutil.get_terminal_size().columns, 1)
        up = self.shown + (self.column - 1) // width if self.column else self.shown
        self.out.write(("\r" + (f"\x1b[{up}A" if up else "")) + "\x1b[J", ending="")
        self.out.flush()
        self.shown = self.column = 0
