"""Every page carries the site's Content-Security-Policy (django-csp): no
inline script anywhere, nothing loaded from elsewhere, never framed. The
browser tests hold every page they open to it (tests/browser/conftest.py);
these check the header and the markup without a browser."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from crm.models import Role
from tests.factories import lead_create, member_create

pytestmark = pytest.mark.django_db


def policy(response) -> dict[str, str]:
    return {d.split(" ", 1)[0]: d.split(" ", 1)[1] for d in response["Content-Security-Policy"].split("; ")}


@pytest.mark.parametrize(
    "path", ["/admin/login/", "/app/", "/app/inbox/", "/admin/", "/admin/crm/lead/", "/api/docs/", "/api/v1/leads/"]
)
def test_every_page_forbids_inline_script_foreign_sources_and_framing(business, path):
    owner = member_create(business, Role.OWNER, username="olivia")
    lead_create(business)
    client = Client()
    if path != "/admin/login/":
        client.force_login(owner.user)
    response = client.get(path, follow=True)
    assert response.status_code == 200
    directives = policy(response)
    assert directives["script-src"] == "'self'" and directives["default-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'" and directives["object-src"] == "'none'"
    page = response.content.decode()
    if "html" in response["Content-Type"]:
        inline = [s for s in re.findall(r"<script\b([^>]*)>", page) if "src=" not in s and "json" not in s]
        assert not inline, f"inline scripts on {path}: {inline}"
        assert not re.search(r"\son[a-z]+=\"", page), f"an event handler attribute on {path}"


def test_the_api_docs_load_swagger_ui_setup_as_a_script_file(business):
    owner = member_create(business, Role.OWNER, username="olivia")
    client = Client()
    client.force_login(owner.user)
    page = client.get("/api/docs/").content.decode()
    setup = re.search(r"<script src=\"([^\"]*script=[^\"]*)\"", page)
    assert setup, "Swagger UI's setup is a script file"
    script = client.get(setup.group(1).replace("&amp;", "&"))
    assert script.status_code == 200 and "SwaggerUIBundle" in script.content.decode()
