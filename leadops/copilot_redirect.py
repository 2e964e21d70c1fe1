"""The Human Setter Copilot's old address (`/admin/leads/<id>/copilot/`).

What the copilot page did — the context, the suggested approved reply, the
send through the gate — is the workspace's thread now
(`leadops.workspace`); links to the copilot land there. The lead must still
be one whose conversation the user may see: a technician's or another
business's lead is a 404 here too.
"""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect

from crm.selectors import lead_list_visible


@staff_member_required
def lead_copilot(request: HttpRequest, public_id: str) -> HttpResponse:
    if not lead_list_visible(request.user, "message.view").filter(public_id=public_id).exists():
        raise Http404("no such lead")
    return redirect("workspace:thread", public_id=public_id)
