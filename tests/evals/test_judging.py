"""The `judge` check's judge (agents/evals/judging.py): an ordinary run with the verdict schema, through the real
OpenAI SDK talking to the local HTTP stub; its corrections, retries and errors, its cost, the choice of its model;
and the offline demo model's rule-based judge, alone and through `run_evals`."""

from __future__ import annotations

import json

import pytest
import yaml
from django.core.management import call_command

from agents import errors
from agents.engine.prompts import JUDGE, JUDGE_MARK, VERDICT_SCHEMA
from agents.evals.cases import DEFAULT_CASES, Case
from agents.evals.checks import Evidence, Graders, JudgeError, Verdict, parse_check
from agents.evals.judging import ANSWER_CHARS, ATTEMPTS, JUDGE_TURNS, JudgeModel, judge_for, judge_model
from agents.models import DailyUsage, EvalResult, EvalRun, Run
from agents.providers import demo
from agents.usage import quotas
from tests.conftest import make_user
from tests.evals.conftest import command
from tests.providers.stub_llm import OPENAI_PATH, fake_key, openai_text, openai_usage

pytestmark = pytest.mark.django_db

RUBRIC = "The answer thanks the user."
TASK = "Say thanks."
ANSWER = "Thank you!"
JUDGE_RUN = {"eval": "judge"}


@pytest.fixture
def openai(settings, stub):
    """The openai provider pointed at the stub; no judge model configured, no retries of the SDK."""
    settings.OPENAI_API_KEY = fake_key()
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    settings.AGENT_LLM_MAX_RETRIES = 0
    settings.AGENT_EVAL_JUDGE_MODEL = ""
    settings.AGENT_DEFAULT_PROTOCOL = "tools"
    return stub


@pytest.fixture
def user(db):
    return make_user("judged")


def verdict_text(score, reason: str = "it thanks the user") -> str:
    return json.dumps({"score": score, "reason": reason})


def reply(stub, text: str, *, repeat: bool = False, usage=(100, 20)) -> None:
    stub.add("POST", OPENAI_PATH, json=openai_text(text, usage=openai_usage(*usage)), repeat=repeat)


def judge_runs():
    return list(Run.objects.filter(metadata=JUDGE_RUN).order_by("created_at"))


def sent(stub, n: int) -> dict:
    """The n-th request the stub received, as JSON."""
    return [r for r in stub.requests if r.path == OPENAI_PATH][n].json()


# --- (a) a valid verdict --------------------------------------------------------------------------------------------


def test_a_valid_verdict_gives_the_score_and_the_reason(openai, user):
    reply(openai, verdict_text(0.9, "polite and short"))
    judge = judge_for(user, "openai", "gpt-test")

    assert judge(RUBRIC, TASK, ANSWER, None) == Verdict(0.9, "polite and short", 0)  # no price for gpt-test

    (run,) = judge_runs()
    assert run.owner == user and run.metadata == JUDGE_RUN
    assert (run.provider, run.model, run.tools) == ("openai", "gpt-test", [])
    assert (run.status, run.stop_reason, run.turns) == ("done", "final_answer", 1)
    assert run.output_json == {"score": 0.9, "reason": "polite and short"}
    assert run.input == JUDGE.format(rubric=RUBRIC, task=TASK, answer=ANSWER)
    assert run.steps.filter(kind="model").count() == 1 and run.prompt_tokens == 100

    body = sent(openai, 0)
    assert body["model"] == "gpt-test"
    system, question = body["messages"][0]["content"], body["messages"][-1]["content"]
    assert json.dumps(VERDICT_SCHEMA, sort_keys=True) in system  # the output schema is the run's
    assert question.startswith(JUDGE_MARK) and "Rubric:\nThe answer thanks the user." in question
    assert "The task the answer was given:\nSay thanks." in question and "The answer to grade:\nThank you!" in question
    assert openai.count("POST", OPENAI_PATH) == 1


def test_a_fenced_verdict_is_read_too(openai, user):
    reply(openai, "```json\n" + verdict_text(1) + "\n```")
    assert judge_for(user, "openai", "gpt-test")(RUBRIC, TASK, ANSWER, None).score == 1.0


def test_the_prompt_says_when_there_is_no_task_and_cuts_a_long_answer(openai, user):
    reply(openai, verdict_text(0.5))
    judge_for(user, "openai", "gpt-test")(f"  {RUBRIC}\n", "  ", "a" * (ANSWER_CHARS + 500), None)
    (run,) = judge_runs()
    assert run.input == JUDGE.format(rubric=RUBRIC, task="(none given)", answer="a" * ANSWER_CHARS)


def test_a_long_reason_is_cut(openai, user):
    reply(openai, verdict_text(0.7, "r" * 2000))
    assert judge_for(user, "openai", "gpt-test")(RUBRIC, TASK, ANSWER, None).reason == "r" * 500


def test_a_judge_check_passes_with_the_verdict(openai, user):
    reply(openai, verdict_text(0.8))
    case = Case(id="j", input=TASK, check={"type": "judge", "rubric": RUBRIC, "threshold": 0.75})
    result = case.grade(Evidence(output=ANSWER, input=TASK), Graders(judge=judge_for(user, "openai", "gpt-test")))
    assert (result.passed, result.score, result.reason) == (True, 0.8, "")


# --- (b) a malformed verdict, corrected within the run ------------------------------------------------------------


@pytest.mark.parametrize(
    "first",
    ["I think it is quite good.", verdict_text(2), json.dumps({"score": 0.5}), json.dumps([0.5])],
    ids=["not JSON", "score above 1", "no reason", "not an object"],
)
def test_a_malformed_verdict_is_corrected_within_the_run(openai, user, first):
    reply(openai, first)
    reply(openai, verdict_text(0.6, "second try"))

    verdict = judge_for(user, "openai", "gpt-test")(RUBRIC, TASK, ANSWER, None)

    assert (verdict.score, verdict.reason) == (0.6, "second try")
    assert openai.count("POST", OPENAI_PATH) == 2
    (run,) = judge_runs()  # one run: the engine's correction, not a second attempt
    assert (run.turns, run.stop_reason, run.output_json["score"]) == (2, "final_answer", 0.6)
    (error,) = run.steps.filter(kind="error")
    assert error.data["output"] and error.data["message"].startswith("The final answer does not fit the output schema")
    correction = sent(openai, 1)["messages"][-1]
    assert correction["role"] == "user"
    assert correction["content"].startswith("Your final answer does not fit the required output schema")


# --- (c) never a verdict: JudgeError after ATTEMPTS runs -----------------------------------------------------------


def test_always_malformed_is_a_judge_error_after_every_attempt(openai, user):
    reply(openai, "no verdict from me", repeat=True)
    judge = judge_for(user, "openai", "gpt-test")

    with pytest.raises(JudgeError) as raised:
        judge(RUBRIC, TASK, ANSWER, None)

    runs = judge_runs()
    assert len(runs) == ATTEMPTS == 2
    assert all(r.owner == user and r.turns == JUDGE_TURNS and r.stop_reason == "max_turns" for r in runs)
    assert openai.count("POST", OPENAI_PATH) == ATTEMPTS * JUDGE_TURNS
    assert str(raised.value).startswith(f"the judge run {runs[-1].pk} stopped: max_turns")
    assert raised.value.cost_nanos == 0


def test_a_judge_check_whose_judge_never_answers_counts_as_an_error(openai, user):
    reply(openai, "no verdict from me", repeat=True)
    check = parse_check({"type": "judge", "rubric": RUBRIC, "threshold": 0}, "case 'j': check")
    case = Case(id="j", input=TASK, checks=(check,), pass_score=0.0)

    result = case.grade(Evidence(output=ANSWER, input=TASK), Graders(judge=judge_for(user, "openai", "gpt-test")))

    (outcome,) = result.outcomes
    assert (outcome.passed, outcome.error, outcome.score) == (False, True, 0.0)
    assert outcome.reason.startswith(f"judge error: the judge run {judge_runs()[-1].pk} stopped: max_turns")
    assert (result.passed, result.reason) == (False, outcome.reason)  # pass_score 0, and still not a pass


def test_a_verdict_on_the_second_attempt_is_used(openai, user):
    for _ in range(JUDGE_TURNS):
        reply(openai, "no verdict")
    reply(openai, verdict_text(0.4, "late"))
    verdict = judge_for(user, "openai", "gpt-test")(RUBRIC, TASK, ANSWER, None)
    assert (verdict.score, verdict.reason) == (0.4, "late")
    first, second = judge_runs()
    assert (first.stop_reason, second.stop_reason, second.turns) == ("max_turns", "final_answer", 1)


def test_a_judge_whose_run_cannot_start_is_a_judge_error(settings, user):
    settings.AGENT_DAILY_TOKEN_QUOTA = 100
    DailyUsage.objects.create(owner=user, day=quotas.today(), prompt_tokens=1000)
    with pytest.raises(JudgeError, match="daily token quota of 100 tokens is used up") as raised:
        judge_for(user, "demo", "demo-1")(RUBRIC, TASK, ANSWER, None)
    assert raised.value.cost_nanos == 0 and judge_runs() == []


def test_a_judge_model_that_cannot_be_used_is_a_judge_error(settings, user):
    settings.AGENT_EVAL_JUDGE_MODEL = ""
    judge = judge_for(user, "demo", "demo-1")
    with pytest.raises(JudgeError, match="^judge model nope/model: Provider 'nope' is not allowed here"):
        judge(RUBRIC, TASK, ANSWER, "nope/model")
    outcome = parse_check({"type": "judge", "rubric": RUBRIC, "model": "nope/model"}, "c").grade(
        Evidence(output=ANSWER), Graders(judge=judge)
    )
    assert outcome.error and not outcome.passed and outcome.reason.startswith("judge error: judge model nope/model")
    assert judge_runs() == []


# --- (d) what judging costs ---------------------------------------------------------------------------------------

PRICES = {"openai/gpt-test": {"input": "1000", "output": "2000"}}  # per million tokens
CALL_NANOS = (100 * 1000 + 20 * 2000) * 10**9 // 10**6  # 100 prompt and 20 completion tokens a call


def test_the_verdict_costs_what_its_run_cost(openai, user, settings):
    settings.AGENT_PRICES = PRICES
    reply(openai, verdict_text(1))
    verdict = judge_for(user, "openai", "gpt-test")(RUBRIC, TASK, ANSWER, None)
    (run,) = judge_runs()
    assert verdict.cost_nanos == run.cost_nanos == CALL_NANOS > 0


def test_a_corrected_verdict_costs_both_calls(openai, user, settings):
    settings.AGENT_PRICES = PRICES
    reply(openai, "not JSON")
    reply(openai, verdict_text(1))
    verdict = judge_for(user, "openai", "gpt-test")(RUBRIC, TASK, ANSWER, None)
    (run,) = judge_runs()
    assert verdict.cost_nanos == run.cost_nanos == 2 * CALL_NANOS


def test_a_judge_error_carries_what_every_attempt_cost(openai, user, settings):
    settings.AGENT_PRICES = PRICES
    reply(openai, "no verdict", repeat=True)
    with pytest.raises(JudgeError) as raised:
        judge_for(user, "openai", "gpt-test")(RUBRIC, TASK, ANSWER, None)
    assert raised.value.cost_nanos == sum(r.cost_nanos for r in judge_runs()) == ATTEMPTS * JUDGE_TURNS * CALL_NANOS
    outcome = parse_check({"type": "judge", "rubric": RUBRIC}, "c").grade(
        Evidence(output=ANSWER), Graders(judge=judge_for(user, "openai", "gpt-test"))
    )
    assert outcome.error and outcome.cost_nanos == ATTEMPTS * JUDGE_TURNS * CALL_NANOS


# --- (e) the judge's model ------------------------------------------------------------------------------------------


def test_the_judge_model_is_the_model_under_test_by_default(settings):
    settings.AGENT_EVAL_JUDGE_MODEL = ""
    assert judge_model(None, "demo", "demo-1") == JudgeModel("demo", "demo-1")
    assert judge_model(None, "demo", "") == JudgeModel("demo", "demo-1")  # the provider's default model


def test_the_checks_provider_slash_model(openai, settings):
    settings.OPENROUTER_API_KEY = fake_key("sk-or-test-")
    assert judge_model("openai/gpt-4o-mini", "demo", "demo-1") == JudgeModel("openai", "gpt-4o-mini")
    # the provider is up to the first slash; the model may have its own
    assert judge_model("openrouter/openai/gpt-4.1-mini", "demo", "demo-1") == JudgeModel(
        "openrouter", "openai/gpt-4.1-mini"
    )
    assert judge_model("openai", "demo", "demo-1") == JudgeModel("openai", "gpt-4.1-mini")  # its default model


def test_agent_eval_judge_model_is_used_unless_the_check_names_one(openai, settings):
    settings.AGENT_EVAL_JUDGE_MODEL = "openai/gpt-judge"
    assert judge_model(None, "demo", "demo-1") == JudgeModel("openai", "gpt-judge")
    assert judge_model("demo/demo-1", "openai", "gpt-test") == JudgeModel("demo", "demo-1")


def test_the_judge_runs_on_the_chosen_model(openai, user, settings):
    settings.AGENT_EVAL_JUDGE_MODEL = "openai/gpt-judge"
    reply(openai, verdict_text(1), repeat=True)
    judge = judge_for(user, "demo", "demo-1")
    judge(RUBRIC, TASK, ANSWER, None)
    judge(RUBRIC, TASK, ANSWER, "openai/gpt-named")
    assert [sent(openai, n)["model"] for n in (0, 1)] == ["gpt-judge", "gpt-named"]
    assert [(r.provider, r.model) for r in judge_runs()] == [("openai", "gpt-judge"), ("openai", "gpt-named")]


@pytest.mark.parametrize(
    ("named", "problem"),
    [
        ("nope/model", "Provider 'nope' is not allowed here"),
        ("anthropic/claude-test", "ANTHROPIC_API_KEY"),
        ("openai/gpt-unlisted", "Model 'gpt-unlisted' is not allowed for provider 'openai'"),
    ],
    ids=["unknown provider", "no key", "not in the allowlist"],
)
def test_a_judge_model_that_cannot_be_used_is_an_invalid_request(openai, settings, named, problem):
    settings.ANTHROPIC_API_KEY = ""
    settings.AGENT_MODELS = {**settings.AGENT_MODELS, "openai": ["gpt-4.1-mini"]}
    with pytest.raises(errors.InvalidRequest) as raised:
        judge_model(named, "demo", "demo-1")
    (message,) = raised.value.detail["judge"]
    assert message.startswith(f"judge model {named}: ") and problem in message


def test_an_unusable_agent_eval_judge_model_is_an_invalid_request(settings):
    settings.AGENT_EVAL_JUDGE_MODEL = "nope/model"
    with pytest.raises(errors.InvalidRequest, match="judge model nope/model"):
        judge_model(None, "demo", "demo-1")


def test_run_evals_refuses_an_unusable_judge_model_before_anything_is_stored(tmp_path):
    from django.core.management.base import CommandError

    cases = tmp_path / "cases.yaml"
    check = {"type": "judge", "rubric": "r", "model": "nope/model"}
    cases.write_text(yaml.safe_dump([{"id": "j", "input": "hi", "check": check}]), encoding="utf-8")
    with pytest.raises(CommandError) as raised:
        call_command("run_evals", "--cases", str(cases))
    assert raised.value.returncode == 2 and "judge model nope/model" in str(raised.value)
    assert EvalRun.objects.count() == 0 and Run.objects.count() == 0


# --- the demo model's judge, offline ------------------------------------------------------------------------------


def judged(rubric: str, answer: str, task: str = "q") -> dict:
    plan = demo.judged(JUDGE.format(rubric=rubric, task=task, answer=answer))
    return json.loads(plan.answer)


def test_the_demo_judge_scores_0_when_the_quoted_term_is_absent():
    assert judged('The answer is "Paris".', "It is London.") == {
        "score": 0.0,
        "reason": "It has none of the rubric's terms; it lacks Paris.",
    }
    assert judged('The answer is "Paris".', "It is paris.")["score"] == 1.0  # in any case


def test_the_demo_judge_scores_the_share_of_the_terms_found():
    assert judged('Names "Paris" and \u201cthe Seine\u201d.', "Paris, of course.") == {
        "score": 0.5,
        "reason": "It has Paris; it lacks the Seine.",
    }
    # without quoted terms: the rubric's words of five letters or more, but for common ones
    verdict = judged("The answer mentions photosynthesis and chlorophyll.", "Photosynthesis needs light.")
    assert verdict == {"score": 0.5, "reason": "It has photosynthesis; it lacks chlorophyll."}


def test_the_demo_judge_reads_only_the_answer_not_the_task():
    assert judged('The answer is "1000".', "It is 999.", task="Is it 1000?")["score"] == 0.0


def test_the_demo_judge_through_an_ordinary_run(user):
    verdict = judge_for(user, "demo", "demo-1")('The answer is "85".', "What is 12*7, plus 1?", "85", None)
    assert verdict == Verdict(1.0, "It has 85.", 0)
    (run,) = judge_runs()
    assert (run.provider, run.owner, run.output_json) == ("demo", user, {"score": 1.0, "reason": "It has 85."})


def test_the_repo_case_checks_judged_passes_on_the_demo_model():
    command("run_evals", "--only", "checks-judged")  # no SystemExit: every case passed

    eval_run = EvalRun.objects.get()
    results = list(eval_run.results.select_related("run"))
    assert {r.protocol for r in results} == {"tools", "react"}
    for result in results:
        assert (result.passed, result.score, result.output) == (True, 1.0, "1000")
        assert [(c["type"], c["passed"], c["weight"]) for c in result.checks] == [
            ("judge", True, 3.0),
            ("contains", True, 1.0),
        ]
    judges = judge_runs()
    assert len(judges) == 2
    assert {j.owner_id for j in judges} == {r.run.owner_id for r in results}  # each case's own eval user
    assert all(j.output_json == {"score": 1.0, "reason": "It has 1000."} for j in judges)


def test_a_judged_case_whose_answer_lacks_the_term_fails_on_the_demo_model(tmp_path):
    repo = {c["id"]: c for c in yaml.safe_load(DEFAULT_CASES.read_text(encoding="utf-8"))}
    case = {**repo["checks-judged"], "id": "judged-wrong", "protocols": ["tools"], "pass_score": None}
    case["checks"] = [{"type": "judge", "rubric": 'The answer names "Paris".'}]
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump([case]), encoding="utf-8")

    with pytest.raises(SystemExit) as raised:
        command("run_evals", "--cases", str(path))

    assert raised.value.code == 1
    result = EvalResult.objects.get()
    assert (result.passed, result.score) == (False, 0.0)
    assert result.reason == "judged 0.00 (below 0.5): It has none of the rubric's terms; it lacks Paris."
    assert result.checks[0]["type"] == "judge" and "error" not in result.checks[0]
