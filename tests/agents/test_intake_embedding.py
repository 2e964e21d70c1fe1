"""The hosted form may be framed by the business's own sites only."""

from __future__ import annotations

import pytest
from django.test import Client

from crm.models import Business, Source

pytestmark = pytest.mark.django_db


@pytest.fixture
def hosted(business: Business) -> Source:
    return Source.objects.create(business=business, key="quote", provider="hosted_form")


def test_by_default_the_hosted_form_cannot_be_framed_anywhere(hosted):
    response = Client().get("/f/quote/")
    assert response["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"].split("; ")


def test_the_business_origins_may_frame_the_form_and_no_other_site(hosted, business):
    Business.objects.filter(pk=business.pk).update(embed_origins=["https://acme.example", "https://www.acme.example"])
    for response in (Client().get("/f/quote/"), Client().post("/f/quote/", {"phone": "2125550147", "nonce": "e"})):
        assert response.status_code == 200
        directives = response["Content-Security-Policy"].split("; ")
        assert "frame-ancestors 'self' https://acme.example https://www.acme.example" in directives
        assert "script-src 'self'" in directives, "the rest of the site's policy stays"
        assert not response.has_header("X-Frame-Options")


def test_other_pages_stay_unframeable(hosted, business):
    Business.objects.filter(pk=business.pk).update(embed_origins=["https://acme.example"])
    assert Client().get("/admin/login/")["X-Frame-Options"] == "DENY"


def test_an_embedded_form_posts_without_the_third_party_csrf_cookie_but_other_sites_cannot(hosted, business):
    Business.objects.filter(pk=business.pk).update(embed_origins=["https://acme.example"])
    client = Client(enforce_csrf_checks=True)
    data = {"phone": "2125550147", "nonce": "embedded"}
    assert client.post("/f/quote/", data, HTTP_ORIGIN="http://testserver").status_code == 200  # framed: our own page
    assert client.post("/f/quote/", {**data, "nonce": "b"}, HTTP_ORIGIN="https://acme.example").status_code == 200
    assert client.post("/f/quote/", {**data, "nonce": "c"}, HTTP_ORIGIN="https://evil.example").status_code == 403
    assert client.post("/f/quote/", {**data, "nonce": "d"}).status_code == 403


def test_without_embed_origins_every_post_needs_the_csrf_token(hosted):
    client = Client(enforce_csrf_checks=True)
    response = client.post("/f/quote/", {"phone": "2125550147"}, HTTP_ORIGIN="http://testserver")
    assert response.status_code == 403
