"""Runs and their steps. Steps are append-only; the run row holds what a list view needs."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from agents.engine import steps as engine_steps
from agents.runconfig.options import RunProtocol as RunProtocol
from agents.runconfig.storage import AgentColumns, RunColumns


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    DONE = "done"


class StopReason(models.TextChoices):
    FINAL_ANSWER = "final_answer"
    MAX_TURNS = "max_turns"
    TIMEOUT = "timeout"
    MODEL_ERROR = "model_error"
    CANCELLED = "cancelled"
    QUOTA_EXCEEDED = "quota_exceeded"
    OUTPUT_TRUNCATED = "output_truncated"
    CONTENT_FILTERED = "content_filtered"
    REFUSED = "refused"
    USAGE_LIMIT = "usage_limit"
    GUARDRAIL = "guardrail"


class RunMode(models.TextChoices):
    SYNC = "sync"
    STEP = "step"
    BACKGROUND = "background"


# A step's kind as the engine declares it (agents/engine/steps.py), mirrored as the column's choices.
StepKind = models.TextChoices("StepKind", [(kind.name, kind.value) for kind in engine_steps.StepKind])


class Agent(AgentColumns):
    """A named, stored configuration a run can start from (docs/api.md#agents); staff edit it in the admin.

    Every field but `name` is optional (its options: AgentColumns, agents/runconfig/storage.py): empty means the
    built-in default. A run records what it used (its own columns), so editing an agent never changes the record of
    a run that already happened.
    """

    name = models.SlugField(max_length=64, unique=True, help_text="how runs name it: letters, digits, - and _")
    description = models.CharField(
        max_length=500, blank=True, default="", help_text="what it is good for: what another agent calling it is told"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", editable=False
    )
    # Online evaluators (docs/evals.md#scores-on-production-runs): [{"name", "check", "sample"}], each scoring a
    # sampled fraction of this agent's finished runs on the worker; checked by agents.evals.online.evaluator_problems.
    evaluators = models.JSONField(default=list, blank=True)
    # Its current version (agents/runs/catalog.py): every change, from the API or the admin, makes a new one.
    version = models.PositiveIntegerField(default=0, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AgentVersion(models.Model):
    """One immutable version of an agent: what it was after one change (docs/agents.md#versions). Kept by name when
    the agent is deleted, for the runs that used it; `name@n` runs version n."""

    agent = models.ForeignKey(Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="versions")
    name = models.SlugField(max_length=64)
    version = models.PositiveIntegerField()
    # Its description, options (as the agent stores them: empty means the default) and evaluators.
    config = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    restored_from = models.PositiveIntegerField(null=True, blank=True, help_text="the version it restores")

    class Meta:
        ordering = ["name", "-version"]
        constraints = [models.UniqueConstraint(fields=["name", "version"], name="agentversion_name_version")]

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


class Thread(models.Model):
    """A conversation: its runs, oldest first, are the earlier turns the next run's model sees."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="threads")
    title = models.CharField(max_length=200, blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True, help_text="the client's own: flat string/number/bool values")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, help_text="when a run was last added: the list's order")
    # `history: "summarize"` (docs/threads.md#long-threads): the earliest runs' turns condensed by the model, and how
    # many of the thread's runs (oldest first) it covers; later runs extend it rather than redo it.
    summary = models.TextField(blank=True, default="")
    summary_runs = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"], name="thread_owner_updated")]

    def __str__(self) -> str:
        return self.title or f"thread {str(self.id)[:8]}"


class Document(models.Model):
    """A file given to a run (PDF or plain text), or an image of a thread's history: stored once per owner and
    content, and referenced by the input parts of the runs that use it (`{"type": "file", "document": id}`), never
    copied into each turn's history (docs/documents.md)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="documents")
    sha256 = models.CharField(max_length=64)
    media_type = models.CharField(max_length=100)
    name = models.CharField(max_length=200, blank=True, default="")
    size = models.PositiveIntegerField()
    data = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "sha256", "media_type"], name="document_owner_content")]

    def __str__(self) -> str:
        return self.name or f"document {str(self.id)[:8]}"


class Run(RunColumns):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: run_owner_created (owner, -created_at) leads with owner_id and serves every look-up by owner.
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs", db_index=False)
    # The conversation this run continues (its runs and their steps go with it when it is deleted); `history` is
    # the earlier turns as this run's model saw them, stored so the record never changes when the thread does.
    thread = models.ForeignKey(
        Thread, on_delete=models.CASCADE, null=True, blank=True, related_name="runs", db_index=False
    )
    history = models.JSONField(default=list, blank=True)
    # The agent it started from (its name, kept as it was); the options it ran with are its RunColumns
    # (agents/runconfig/storage.py), read as one value: `run.config`.
    agent = models.CharField(max_length=64, null=True, blank=True)
    agent_version = models.PositiveIntegerField(null=True, blank=True)  # the agent's version it ran (`name@n`)
    output_json = models.JSONField(null=True, blank=True)
    input = models.TextField()
    # An input given as a list of parts (text and images, docs/api.md#images-on-a-run) as it was given; `input` then
    # holds its text, for lists, search and text-only readers. Null for a string input (most runs).
    input_parts = models.JSONField(null=True, blank=True)
    # A child run (a sub-agent called as a tool): the run whose call started it, the index of the model step that
    # asked for the call, and the call's id (one child per call: a repeated call finds its child). `depth`: 0 for a
    # run a client started.
    parent = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="children", db_index=False
    )
    parent_step = models.PositiveIntegerField(null=True, blank=True)
    parent_call_id = models.CharField(max_length=200, blank=True, default="")
    depth = models.PositiveSmallIntegerField(default=0)
    # A fork: the run and step whose state this run started from (the id only: a fork outlives its original).
    forked_from_run = models.UUIDField(null=True, blank=True)
    forked_from_step = models.PositiveIntegerField(null=True, blank=True)
    # multitask_strategy "enqueue": created while its thread had a run in progress, it waits its turn (queued) and
    # starts when the runs before it are done.
    thread_queued = models.BooleanField(default=False)
    # The client's own labels (a flat object of strings, numbers and booleans), searchable: ?metadata.<key>=<value>.
    metadata = models.JSONField(default=dict, blank=True)
    # The trace it was created in (W3C traceparent/tracestate; {} with tracing off): a worker's spans continue it.
    trace_context = models.JSONField(default=dict, blank=True)
    # What its model calls cost in billionths of AGENT_CURRENCY (null while no call had a known price).
    cost_nanos = models.BigIntegerField(null=True, blank=True)
    mode = models.CharField(max_length=16, choices=RunMode.choices, default=RunMode.SYNC)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.RUNNING)
    stop_reason = models.CharField(max_length=16, choices=StopReason.choices, null=True, blank=True)
    output = models.TextField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    turns = models.PositiveIntegerField(default=0)
    reflections = models.PositiveSmallIntegerField(default=0)
    attempt_start_turn = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    deadline = models.DateTimeField()
    # Approvals: when the calls now pending expire (`approval_ttl_s` after they paused).
    approval_expires_at = models.DateTimeField(null=True, blank=True)
    # The lease: which worker may advance the run, and until when (a killed worker's lease expires).
    lease_owner = models.CharField(max_length=64, blank=True, default="")
    lease_expires = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["owner", "-created_at"], name="run_owner_created"),
            models.Index(fields=["status", "-created_at"], name="run_status_created"),
            models.Index(fields=["stop_reason", "-created_at"], name="run_stop_created"),
            # The expiry sweep's look-up: paused runs by when their pending calls expire.
            models.Index(
                fields=["approval_expires_at"],
                name="run_approval_expiry",
                condition=models.Q(status="awaiting_approval"),
            ),
            # A thread's runs in order; runs outside threads (most of them) stay out of the index.
            models.Index(
                fields=["thread", "created_at"], name="run_thread_created", condition=models.Q(thread__isnull=False)
            ),
            # A run's children, in order; runs without a parent (nearly all) stay out of the index.
            models.Index(
                fields=["parent", "created_at"], name="run_parent_created", condition=models.Q(parent__isnull=False)
            ),
        ]
        constraints = [
            # One run at a time per thread, enforced by the database: a second run while one is not done fails.
            # (A run waiting its turn, thread_queued, is not yet active.)
            models.UniqueConstraint(
                fields=["thread"],
                condition=models.Q(thread__isnull=False) & ~models.Q(status="done") & models.Q(thread_queued=False),
                name="run_thread_one_active",
            ),
            # One child per call of a parent: a parent that repeats a call (a resumed unit) finds the child it started.
            models.UniqueConstraint(
                fields=["parent", "parent_call_id"],
                condition=models.Q(parent__isnull=False),
                name="run_parent_call_unique",
            ),
        ]
        permissions = [("review_run", "Can see every run and decide approvals")]

    def __str__(self) -> str:
        return f"run {str(self.id)[:8]} ({self.status.replace('_', ' ')})"  # a page title: "(awaiting approval)"

    @property
    def ok(self) -> bool:
        return self.stop_reason == StopReason.FINAL_ANSWER

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Step(models.Model):
    # No index of its own: the unique (run, index) below leads with run_id and serves every look-up by run.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps", db_index=False)
    index = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=StepKind.choices)
    data = models.JSONField(default=dict)  # the kind's fields, as docs/api.md#the-step-object says
    latency_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "index"]
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="step_run_index_unique")]

    def __str__(self) -> str:
        return f"step {self.index} ({self.kind})"

    def as_event(self) -> dict:
        """The engine's view of this step."""
        return {"index": self.index, "kind": self.kind, "latency_ms": self.latency_ms, **self.data}


class IdempotencyKey(models.Model):
    """A client's Idempotency-Key for POST /runs: the first response is replayed for 24 hours."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(null=True, blank=True)
    # The run the first request created, bound in the transaction that inserted it: a retry after any failure of
    # that request (a crash, a deploy) finds this run instead of creating another.
    run = models.ForeignKey("Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="idempotency_user_key_unique")]

    def __str__(self) -> str:
        return f"idempotency key {self.key[:16]}"


class PendingApproval(Run):
    """Runs waiting for a human decision (an admin view of Run)."""

    class Meta:
        proxy = True
        verbose_name = "pending approval"
        verbose_name_plural = "pending approvals"


class EvalRun(models.Model):
    """One execution of the eval cases against a provider/model/protocol configuration."""

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    provider = models.CharField(max_length=32)
    model = models.CharField(max_length=200)
    protocol = models.CharField(max_length=16, help_text="tools, react, or 'per case'")
    max_reflections = models.PositiveSmallIntegerField(default=0)
    cases_file = models.CharField(max_length=300)
    only = models.CharField(max_length=200, blank=True, default="")
    agent = models.CharField(
        max_length=80, blank=True, default="", help_text="the agent every case started from (name@n)"
    )
    cases_sha256 = models.CharField(max_length=64, blank=True, default="", help_text="the cases' content, hashed")
    repeat = models.PositiveSmallIntegerField(default=1, help_text="attempts of each case and protocol")
    baseline = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", help_text="compared against"
    )
    total = models.PositiveIntegerField(default=0)
    passed = models.PositiveIntegerField(default=0)
    pass_rate = models.FloatField(default=0.0)
    score = models.FloatField(default=0.0, help_text="the mean of the results' scores (0-1)")
    mean_turns = models.FloatField(default=0.0)
    p50_latency_ms = models.FloatField(default=0.0)
    p95_latency_ms = models.FloatField(default=0.0)
    tokens = models.PositiveIntegerField(default=0)
    cost_nanos = models.BigIntegerField(default=0, help_text="the cases' runs and judges, in billionths")
    # The gates it was held to and how it fared (agents.evals.gates.Verdict.as_dict); null when none was asked.
    gate = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"eval {self.pk} {self.provider}/{self.model} {self.passed}/{self.total}"


class EvalResult(models.Model):
    eval_run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="results")
    case_id = models.CharField(max_length=100)
    protocol = models.CharField(max_length=8)
    run = models.ForeignKey(Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    passed = models.BooleanField(default=False)
    reason = models.TextField(blank=True, default="", help_text="why the case did not pass")
    output = models.TextField(null=True, blank=True)
    attempt = models.PositiveSmallIntegerField(default=1, help_text="1 to the eval run's repeat")
    score = models.FloatField(default=0.0, help_text="the checks' weighted score (0-1)")
    checks = models.JSONField(default=list, blank=True, help_text="each check's type, passed, score and reason")
    turns = models.PositiveIntegerField(default=0)
    latency_ms = models.FloatField(default=0.0)
    tokens = models.PositiveIntegerField(default=0)
    cost_nanos = models.BigIntegerField(default=0, help_text="the case's runs and its judges, in billionths")

    class Meta:
        ordering = ["eval_run", "case_id", "protocol", "attempt"]
        constraints = [
            models.UniqueConstraint(
                fields=["eval_run", "case_id", "protocol", "attempt"], name="evalresult_case_attempt_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.case_id} [{self.protocol}] #{self.attempt} {'pass' if self.passed else 'fail'}"


class ScoreSource(models.TextChoices):
    ONLINE = "online"  # an agent's evaluator
    HUMAN = "human"  # feedback: the run's owner or a reviewer


class RunScore(models.Model):
    """A score on a run (docs/evals.md#scores-on-production-runs): an agent's online evaluator or a person's
    feedback."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="scores")
    name = models.CharField(max_length=64)
    score = models.FloatField()
    passed = models.BooleanField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    source = models.CharField(max_length=8, choices=ScoreSource.choices)
    comment = models.TextField(blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "created_at"]
        indexes = [
            models.Index(fields=["run", "created_at"], name="runscore_run_idx"),
            models.Index(fields=["score", "created_at"], name="runscore_low_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.score:.2f} ({self.source})"


class LabelledCase(models.Model):
    """A run a reviewer labelled in the admin's review queue: an eval case (agents.evals.export's format, its tool
    outputs as fixtures, the reviewer's expected answer as its check), exported by `export_cases --labelled`."""

    run = models.ForeignKey(Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    case_id = models.CharField(max_length=100, unique=True)
    case = models.JSONField(help_text="the case, as a cases file holds it")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.case_id


class WebhookEvent(models.TextChoices):
    """Event names on the wire (docs/api.md#webhooks): API, never renamed."""

    RUN_DONE = "run.done"
    RUN_AWAITING_APPROVAL = "run.awaiting_approval"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class Webhook(models.Model):
    """A user's endpoint for run events; `secret` signs every delivery and is shown once, when it is created."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=2000)
    events = models.JSONField(default=list, help_text="event names, from WebhookEvent")
    secret = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    """One event for one webhook: its id is the X-Reactsite-Delivery header; every attempt is recorded."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=32, choices=WebhookEvent.choices)
    # The run's id only, not a key: a delivery outlives a deleted run (retention), and deleting runs stays one table.
    run_id = models.UUIDField(null=True, blank=True)
    # The JSON body as sent, byte for byte the same on every attempt (jsonb would reorder its keys).
    payload = models.TextField()
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, help_text="when the event happened (the payload's)")
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "webhook deliveries"
        indexes = [models.Index(fields=["status", "-created_at"], name="delivery_status_created")]

    def __str__(self) -> str:
        return f"{self.event} {str(self.id)[:8]} ({self.status})"


class WebhookAttempt(models.Model):
    """One POST of a delivery: the receiver's status code, or why there was none."""

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveSmallIntegerField()
    at = models.DateTimeField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [models.UniqueConstraint(fields=["delivery", "number"], name="webhookattempt_number_unique")]

    def __str__(self) -> str:
        return f"attempt {self.number}: {self.status_code or self.error}"


class DailyUsage(models.Model):
    """Tokens a user's runs used on one UTC day; kept by a database trigger on the run row (migration 0010), so the
    unit's own commit counts them. `max_unit`: the largest single commit's tokens that day (quota admission)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    max_unit = models.PositiveBigIntegerField(default=0)
    cost_nanos = models.BigIntegerField(default=0, help_text="what the day's model calls cost, in billionths")

    class Meta:
        ordering = ["-day"]
        verbose_name_plural = "daily usage"
        constraints = [models.UniqueConstraint(fields=["owner", "day"], name="dailyusage_owner_day_unique")]
        indexes = [models.Index(fields=["day"], name="dailyusage_day")]

    def __str__(self) -> str:
        return f"{self.day}: {self.total_tokens} tokens"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class TokenQuota(models.Model):
    """A user's own daily token quota, instead of AGENT_DAILY_TOKEN_QUOTA (0: no quota for this user)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="+")
    daily_tokens = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="tokens per UTC day; 0 means no quota for this user; empty: the default"
    )
    daily_cost = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        null=True,
        blank=True,
        help_text="spend per UTC day in AGENT_CURRENCY; 0 means no spend quota for this user; empty: the default",
    )

    class Meta:
        verbose_name = "token quota override"

    def __str__(self) -> str:
        return f"{self.daily_tokens} tokens/day"


class ModelPrice(models.Model):
    """A model's price in AGENT_CURRENCY per million tokens, over the repository's table and AGENT_PRICES
    (agents/usage/prices.py)."""

    provider = models.CharField(max_length=32)
    model = models.CharField(max_length=200)
    input = models.DecimalField(max_digits=12, decimal_places=6, help_text="per million input tokens")
    output = models.DecimalField(max_digits=12, decimal_places=6, help_text="per million output tokens")
    cached_input = models.DecimalField(
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="per million cached input tokens (empty: input)",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["provider", "model"]
        constraints = [models.UniqueConstraint(fields=["provider", "model"], name="modelprice_provider_model_unique")]

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"


class QuotaReservation(models.Model):
    """A model call in flight under a quota (agents.usage.quotas.Admission); it expires with the call's timeout, or
    goes as soon as another worker takes its run (the worker that made it died mid-call)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    tokens = models.PositiveBigIntegerField()
    expires_at = models.DateTimeField()
    # The run whose call it is (not a foreign key: a deleted run's reservation simply expires).
    run_id = models.UUIDField(null=True, blank=True, editable=False)

    class Meta:
        indexes = [
            models.Index(fields=["owner", "expires_at"], name="reservation_owner_expires"),
            models.Index(fields=["run_id"], name="reservation_run"),
        ]


class ApiKeyScope(models.TextChoices):
    RUNS_READ = "runs:read"
    RUNS_WRITE = "runs:write"
    APPROVALS = "approvals"
    MEMORY = "memory"
    AGENTS = "agents"  # write agents over the API (docs/agents.md)


class ApiKey(models.Model):
    """A key a user made for a client of theirs: named, scoped, optionally expiring, revocable. The secret is shown
    once when it is made; only its hash is stored (its `prefix` finds the row)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    hashed_key = models.CharField(max_length=128, editable=False)
    scopes = models.JSONField(default=list, help_text="from ApiKeyScope")
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class Schedule(models.Model):
    """Runs of an agent (or run options) on a cron schedule, as background runs of its owner."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="schedules")
    name = models.CharField(max_length=100, blank=True, default="")
    cron = models.CharField(max_length=100, help_text="a cron expression: minute hour day-of-month month day-of-week")
    timezone = models.CharField(max_length=64, default="UTC")
    input = models.TextField()
    options = models.JSONField(default=dict, blank=True, help_text="run options: agent, provider, model, max_turns, …")
    enabled = models.BooleanField(default=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_run = models.ForeignKey(Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    last_error = models.TextField(blank=True, default="", help_text="why the last tick did not start a run")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["next_run_at"], name="schedule_due", condition=models.Q(enabled=True)),
        ]

    def __str__(self) -> str:
        return self.name or f"schedule {str(self.id)[:8]}"
