"""deploy/prometheus: promtool accepts the scrape config and the rules, its unit tests pass, and
they cover every alert both ways (series that fire it, series that do not). promtool is Debian's
prometheus package, which .ci/run installs; outside CI its absence skips these tests."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.tools import promtool

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RULE_FILES = sorted((PROMETHEUS / "rules").glob("*.yml"))
UNIT_TESTS = sorted((PROMETHEUS / "tests").glob("*.yml"))
# A name with a colon is a recorded series (level:metric:operations).
RECORDED = re.compile(r"(?<![\w:])[a-zA-Z_]\w*:[\w:]+")


def run_promtool(*args: str, cwd: Path = PROMETHEUS) -> str:
    result = subprocess.run(
        [promtool(), *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def rules() -> list[dict[str, Any]]:
    return [
        rule
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
    ]


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


def test_promtool_accepts_the_scrape_config_and_its_rules() -> None:
    output = run_promtool("check", "config", "prometheus.yml")
    # rule_files is relative to the config: the check must have found and read them.
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in output


def test_promtool_accepts_the_rules() -> None:
    run_promtool("check", "rules", *map(str, RULE_FILES))


def test_the_scrape_job_is_the_one_the_alerts_select() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    selected = {job for alert in alerts() for job in re.findall(r'job="([^"]+)"', alert["expr"])}
    assert selected == jobs == {"llm-proxy"}


def test_the_unit_tests_pass() -> None:
    assert UNIT_TESTS
    run_promtool("test", "rules", *map(str, UNIT_TESTS))


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in UNIT_TESTS:
        document = yaml.safe_load(path.read_text())
        listed = {(path.parent / name).resolve() for name in document["rule_files"]}
        assert listed == {rule_file.resolve() for rule_file in RULE_FILES}
        for case in document["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {alert["alert"] for alert in alerts()}
    assert names - fired == set(), "alerts never shown to fire"
    assert names - quiet == set(), "alerts never shown to stay quiet"


@pytest.mark.parametrize("alert", alerts(), ids=lambda alert: alert["alert"])
def test_every_alert_says_what_and_what_to_do(alert: dict[str, Any]) -> None:
    annotations = alert["annotations"]
    assert annotations["summary"].strip()
    assert annotations["description"].strip()
    assert annotations["runbook"].strip()
    assert alert["labels"]["severity"] in {"warning", "critical"}


def test_recorded_series_are_recorded_before_use() -> None:
    defined = {rule["record"] for rule in rules() if "record" in rule}
    for rule in rules():
        used = set(RECORDED.findall(rule["expr"]))
        assert used <= defined, (rule.get("alert") or rule["record"], used - defined)
