"""The API against its own OpenAPI schema, as every role: schemathesis
generates valid and invalid requests for each operation of `/api/schema/`
and sends them in-process; no answer may be a 5xx, and each status, content
type and body must be the documented one. A short run of
`scripts/api_fuzz.py` (run the script for a long one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command

from scripts import api_fuzz

# The fuzzing phase only, on a few examples per operation, keeps this
# around a minute on two cores (the script adds the coverage phase's
# thousand requests per role); replay a failure with
# `scripts/api_fuzz.py --seed 20261201 --max-examples 3 --no-coverage`.
MAX_EXAMPLES = 3
SEED = 20261201


@pytest.mark.django_db(transaction=True)
def test_every_role_gets_only_documented_answers_and_never_a_server_error() -> None:
    # Transactional: schemathesis sends each request from a worker thread,
    # on a connection of its own, which sees only committed rows.
    reports = api_fuzz.fuzz_all(list(api_fuzz.ROLES), max_examples=MAX_EXAMPLES, seed=SEED, coverage=False)

    assert [report.role for report in reports] == list(api_fuzz.ROLES)
    failed = [line for report in reports if not report.ok for line in report.lines()]
    assert not failed, "\n".join(failed)
    for report in reports:
        assert len(report.operations) >= 30, report.role
    # The roles really differ: the data is there, and it is refused to those who may not read it.
    statuses = {report.role: report.statuses for report in reports}
    assert statuses["owner"][200] > 0 and statuses["setter"][200] > 0
    assert set(statuses["anonymous"]) <= {401, 404}


def test_every_operation_documents_its_errors_in_the_error_shape(db: None, tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    call_command("spectacular", "--format", "openapi-json", "--file", str(out))
    paths = json.loads(out.read_text())["paths"]
    error = {"$ref": "#/components/schemas/Error"}

    api_operations = [
        (path, method, operation)
        for path, item in paths.items()
        if path.startswith("/api/v1/")
        for method, operation in item.items()
    ]
    assert len(api_operations) >= 30
    for path, method, operation in api_operations:
        expected = {"401", "403"}
        if "{" in path or "page" in {p["name"] for p in operation.get("parameters", [])}:
            expected.add("404")  # no such record, or a page past the last
        if "requestBody" in operation:
            expected |= {"400", "415"}
        responses = operation["responses"]
        assert expected <= set(responses), (method, path, sorted(responses))
        for code in {code for code in responses if code.startswith("4")}:
            assert responses[code]["content"]["application/json"]["schema"] == error, (method, path, code)
