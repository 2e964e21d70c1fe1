"""Single sign-on with OpenID Connect, through the whole code flow: Django's
test client signs in at /oidc/authenticate/, the browser's trip to the
provider is a real request to a real local provider (tests/helpers/
oidc_provider.py), and the client comes back to /oidc/callback/ with what
the provider sent. Nothing of ours is patched: the provider is made to
misbehave (another key, an expired token, another audience) instead."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.test import Client
from django_otp.plugins.otp_totp.models import TOTPDevice

from crm.models import Business, Receipt, Role, TeamMember
from crm.services.sso import NO_TEAM, sso_sign_in
from leadops.oidc import UNREACHABLE, UNVERIFIED, discovery_forget
from tests.factories import BusinessFactory, UserFactory, member_create
from tests.helpers.oidc_provider import CLIENT_ID, CLIENT_SECRET, OidcProvider, rsa_key
from tests.helpers.races import run_together

PASSWORD = "pw-for-tests-1"  # tests/factories.py UserFactory
LOGIN = "/admin/login/"


@pytest.fixture
def provider(settings: Any) -> Iterator[OidcProvider]:
    server = OidcProvider()
    server.start()
    settings.OIDC_ISSUER = server.url
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = CLIENT_SECRET
    try:
        yield server
    finally:
        server.stop()
        discovery_forget()


def person(email: str, roles: Any = None, **claims: Any) -> dict[str, Any]:
    """A person at the provider: their claims, the role claim among them."""
    found: dict[str, Any] = {"sub": f"sub-{email}", "email": email, "email_verified": True, **claims}
    if roles is not None:
        found["leadops_roles"] = roles
    return found


def to_provider(client: Client, provider: OidcProvider, next_path: str = "/app/") -> str:
    """The sign-in button: our redirect to the provider, the provider's back.
    Returns the callback's path and query, as the browser would follow it."""
    start = client.get("/oidc/authenticate/", {"next": next_path})
    assert start.status_code == 302
    assert start["Location"].startswith(f"{provider.url}/authorize?")
    back = requests.get(start["Location"], allow_redirects=False, timeout=5)
    assert back.status_code == 302
    callback = urlsplit(back.headers["Location"])
    assert callback.path == "/oidc/callback/"
    return f"{callback.path}?{callback.query}"


def sign_in(client: Client, provider: OidcProvider, next_path: str = "/app/") -> Any:
    return client.get(to_provider(client, provider, next_path))


def signed_in_as(client: Client) -> Any:
    user_id = client.session.get("_auth_user_id")
    return get_user_model().objects.get(pk=user_id) if user_id else None


def refusal_shown(client: Client, response: Any) -> str:
    """The login page a refused sign-in lands on, and the message it shows."""
    assert response.status_code == 302 and response["Location"] == LOGIN
    page = client.get(LOGIN)
    assert page.status_code == 200
    shown = [str(m) for m in get_messages(page.wsgi_request)] or [page.content.decode()]
    return " ".join(shown)


def test_a_new_person_whose_claim_names_a_business_signs_in_as_that_role_and_opens_the_workspace(
    business: Business, provider: OidcProvider
) -> None:
    provider.person = person("sara@acme.example", ["acme:setter"], name="Sara Setter", given_name="Sara")
    # The role claim only in the ID token, as Microsoft Entra sends app roles.
    provider.userinfo = ["email", "email_verified"]
    client = Client()

    response = sign_in(client, provider)

    assert response.status_code == 302 and response["Location"] == "/app/"
    user = signed_in_as(client)
    assert user.email == "sara@acme.example" and user.first_name == "Sara"
    assert user.is_staff and not user.is_superuser and not user.has_usable_password()
    member = TeamMember.objects.get(user=user)
    assert (member.business, member.role, member.is_active, member.display_name) == (
        business,
        Role.SETTER,
        True,
        "Sara Setter",
    )
    assert set(user.groups.values_list("name", flat=True)) == {Role.SETTER}
    assert Receipt.objects.filter(business=business, subject=member.public_id, action="team.member_added").exists()
    # PKCE: the provider was sent an S256 challenge.
    assert provider.authorizations[0]["code_challenge_method"] == "S256"
    workspace = client.get("/app/", follow=True)
    assert workspace.status_code == 200 and workspace.request["PATH_INFO"].startswith("/app/")


def test_an_existing_member_found_by_email_takes_the_claimed_role_and_leaves_teams_the_claim_no_longer_names(
    business: Business, other_business: Business, provider: OidcProvider
) -> None:
    setter = member_create(business, Role.SETTER, username="sam")
    elsewhere = TeamMember.objects.create(business=other_business, user=setter.user, role=Role.MANAGER)
    provider.person = person(setter.user.email.upper(), ["acme:manager", "unknown-shop:owner", "acme"])

    response = sign_in(client := Client(), provider)

    assert response.status_code == 302
    assert signed_in_as(client) == setter.user
    setter.refresh_from_db()
    elsewhere.refresh_from_db()
    assert (setter.role, setter.is_active) == (Role.MANAGER, True)
    assert not elsewhere.is_active
    assert set(setter.user.groups.values_list("name", flat=True)) == {Role.MANAGER}
    changed = Receipt.objects.get(business=business, subject=setter.public_id, action="team.member_changed")
    assert (changed.before, changed.after) == (
        {"role": "setter", "is_active": True},
        {"role": "manager", "is_active": True},
    )
    assert changed.actor == "sso:127.0.0.1:" + provider.url.rsplit(":", 1)[1]
    assert Receipt.objects.filter(business=other_business, subject=elsewhere.public_id).exists()
    assert not Business.objects.filter(slug="unknown-shop").exists()


def test_a_claim_naming_no_known_business_is_refused_and_the_login_page_says_why(
    business: Business, provider: OidcProvider
) -> None:
    provider.person = person("stranger@elsewhere.example", ["nowhere:owner"])
    client = Client()

    shown = refusal_shown(client, sign_in(client, provider))

    assert NO_TEAM in shown
    assert signed_in_as(client) is None
    assert not get_user_model().objects.filter(email="stranger@elsewhere.example").exists()


def test_a_member_whose_claim_names_no_business_any_more_is_refused_and_switched_off(
    business: Business, provider: OidcProvider
) -> None:
    setter = member_create(business, Role.SETTER, username="sam")
    provider.person = person(setter.user.email, [])
    client = Client()

    shown = refusal_shown(client, sign_in(client, provider))

    assert NO_TEAM in shown and signed_in_as(client) is None
    setter.refresh_from_db()
    assert not setter.is_active
    assert not setter.user.groups.exists()


def test_a_token_signed_with_another_key_is_refused(business: Business, provider: OidcProvider) -> None:
    provider.person = person("sara@acme.example", ["acme:setter"])
    provider.sign_with = rsa_key()  # the same key id, someone else's key
    client = Client()

    shown = refusal_shown(client, sign_in(client, provider))

    assert UNVERIFIED in shown and signed_in_as(client) is None
    assert not get_user_model().objects.filter(email="sara@acme.example").exists()


def test_an_expired_token_is_refused(business: Business, provider: OidcProvider) -> None:
    provider.person = person("sara@acme.example", ["acme:setter"])
    provider.lifetime = -600
    client = Client()

    shown = refusal_shown(client, sign_in(client, provider))

    assert UNVERIFIED in shown and signed_in_as(client) is None


def test_a_token_issued_for_another_client_is_refused(business: Business, provider: OidcProvider) -> None:
    provider.person = person("sara@acme.example", ["acme:setter"])
    provider.audience = "someone-elses-app"
    client = Client()

    assert UNVERIFIED in refusal_shown(client, sign_in(client, provider))
    assert signed_in_as(client) is None


def test_a_wrong_pkce_verifier_is_refused_by_the_provider_and_nobody_is_signed_in(
    business: Business, provider: OidcProvider
) -> None:
    provider.person = person("sara@acme.example", ["acme:setter"])
    client = Client()
    callback = to_provider(client, provider)
    # The code reaches someone without our session's verifier (a stolen code).
    state = parse_qs(urlsplit(callback).query)["state"][0]
    session = client.session
    states = session["oidc_states"]
    states[state]["code_verifier"] = "x" * 64
    session["oidc_states"] = states
    session.save()

    shown = refusal_shown(client, client.get(callback))

    assert UNVERIFIED in shown and signed_in_as(client) is None
    assert provider.refusals == ["code_verifier does not match the code_challenge"]


def test_an_operator_superuser_is_never_signed_in_through_the_provider(
    business: Business, provider: OidcProvider
) -> None:
    operator = UserFactory.create(username="operator", is_superuser=True)
    provider.person = person(operator.email, ["acme:owner"])
    client = Client()

    shown = refusal_shown(client, sign_in(client, provider))

    assert "operator" in shown and signed_in_as(client) is None
    assert not TeamMember.objects.filter(user=operator).exists()


def test_an_address_the_provider_has_not_verified_is_refused(business: Business, provider: OidcProvider) -> None:
    setter = member_create(business, Role.SETTER, username="sam")
    provider.person = {**person(setter.user.email, ["acme:setter"]), "email_verified": False}
    client = Client()

    assert "not verified" in refusal_shown(client, sign_in(client, provider))
    assert signed_in_as(client) is None


def test_an_issuer_spelled_with_a_trailing_slash_in_its_tokens_signs_in(
    business: Business, provider: OidcProvider
) -> None:
    # Authentik's issuer ends in a slash; OIDC_ISSUER is read without it.
    provider.issuer = provider.url + "/"
    provider.person = person("sara@acme.example", ["acme:setter"])

    response = sign_in(client := Client(), provider)

    assert response.status_code == 302 and signed_in_as(client) is not None


def test_a_discovery_document_naming_another_issuer_is_not_used(business: Business, provider: OidcProvider) -> None:
    provider.issuer = "https://login.attacker.example"
    client = Client()

    response = client.get("/oidc/authenticate/")

    assert UNREACHABLE in refusal_shown(client, response)


def test_the_person_cancelling_at_the_provider_comes_back_to_the_login_page_with_a_reason(
    business: Business, provider: OidcProvider
) -> None:
    client = Client()
    start = client.get("/oidc/authenticate/")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]

    response = client.get("/oidc/callback/", {"state": state, "error": "access_denied"})

    assert "access_denied" in refusal_shown(client, response)


def test_refused_sign_ins_lock_nobody_out_of_single_sign_on(business: Business, provider: OidcProvider) -> None:
    provider.person = person("stranger@elsewhere.example", ["nowhere:owner"])
    for _ in range(settings.AXES_FAILURE_LIMIT + 1):
        assert sign_in(Client(), provider)["Location"] == LOGIN

    provider.person = person("sara@acme.example", ["acme:setter"])
    client = Client()
    response = sign_in(client, provider)

    assert response.status_code == 302 and response["Location"] == "/app/"
    assert signed_in_as(client) is not None


def test_without_a_role_claim_leadops_keeps_the_roles_and_the_provider_only_says_who_signs_in(
    business: Business, provider: OidcProvider, settings: Any
) -> None:
    settings.OIDC_ROLE_CLAIM = ""
    setter = member_create(business, Role.SETTER, username="sam")
    provider.person = person(setter.user.email, ["acme:owner"])  # ignored

    response = sign_in(client := Client(), provider)

    assert response.status_code == 302 and signed_in_as(client) == setter.user
    setter.refresh_from_db()
    assert setter.role == Role.SETTER
    provider.person = person("stranger@elsewhere.example", ["acme:owner"])
    stranger = Client()
    assert NO_TEAM in refusal_shown(stranger, sign_in(stranger, provider))


def test_a_manager_with_an_authenticator_app_still_enters_a_code_after_single_sign_on(
    business: Business, provider: OidcProvider
) -> None:
    manager = member_create(business, Role.MANAGER, username="mia")
    TOTPDevice.objects.create(user=manager.user, name="authenticator", confirmed=True)
    provider.person = person(manager.user.email, ["acme:manager"])
    client = Client()

    assert sign_in(client, provider, "/admin/").status_code == 302

    page = client.get("/admin/")
    assert page.status_code == 302 and page["Location"].startswith("/account/verify/")


def test_with_local_passwords_off_a_member_s_password_is_refused_and_the_operator_s_still_works(
    business: Business, provider: OidcProvider, settings: Any
) -> None:
    setter = member_create(business, Role.SETTER, username="sam")
    UserFactory.create(username="operator", is_superuser=True)
    assert Client().post(LOGIN, {"username": "sam", "password": PASSWORD}).status_code == 302

    settings.LOCAL_PASSWORDS = False
    refused = Client()
    response = refused.post(LOGIN, {"username": setter.user.username, "password": PASSWORD})
    operator = Client()
    allowed = operator.post(LOGIN, {"username": "operator", "password": PASSWORD})

    assert response.status_code == 200 and signed_in_as(refused) is None
    assert allowed.status_code == 302 and signed_in_as(operator).username == "operator"
    page = Client().get(LOGIN).content.decode()
    assert 'id="sso-sign-in"' in page and 'id="operator-sign-in"' in page


def test_with_single_sign_on_off_its_pages_answer_404_and_the_login_page_has_no_button(settings: Any, db: None) -> None:
    settings.OIDC_ISSUER = ""
    client = Client()

    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/", {"code": "c", "state": "s"}).status_code == 404
    assert client.post("/oidc/callback/").status_code == 404
    page = client.get(LOGIN).content.decode()
    assert "sso-sign-in" not in page and 'id="login-form"' in page

    settings.OIDC_ISSUER = "https://login.example.com"
    page = client.get(LOGIN, {"next": "/app/"}).content.decode()
    assert 'href="/oidc/authenticate/?next=/app/"' in page or 'href="/oidc/authenticate/?next=%2Fapp%2F"' in page


def test_a_username_claim_finds_the_user_by_username(business: Business, provider: OidcProvider, settings: Any) -> None:
    settings.OIDC_USERNAME_CLAIM = "preferred_username"
    setter = member_create(business, Role.SETTER, username="sam")
    provider.person = person("sam@another-address.example", ["acme:setter"], preferred_username="SAM")

    response = sign_in(client := Client(), provider)

    assert response.status_code == 302 and signed_in_as(client) == setter.user


@pytest.mark.django_db(transaction=True)
def test_two_first_sign_ins_of_one_person_at_once_make_one_user_and_one_membership() -> None:
    business = BusinessFactory.create(slug="acme")
    claims = person("sara@acme.example", ["acme:setter"])

    def sign() -> Any:
        return sso_sign_in(claims, issuer="https://login.example.com", match_claim="email", role_claim="leadops_roles")

    outcomes = run_together([sign, sign])

    assert [o.refusal for o in outcomes] == ["", ""]
    assert outcomes[0].user.pk == outcomes[1].user.pk
    assert TeamMember.objects.filter(business=business, role=Role.SETTER).count() == 1
    assert Receipt.objects.filter(business=business, action="team.member_added").count() == 1
