from django.urls import path

from leadops.workspace import booking, deciding, views

app_name = "workspace"

urlpatterns = [
    path("", views.home, name="home"),
    path("inbox/", views.inbox, name="inbox"),
    path("inbox/live/", views.inbox_live, name="inbox-live"),
    path("unread/", views.unread, name="unread"),
    path("leads/<str:public_id>/", views.thread, name="thread"),
    path("leads/<str:public_id>/live/", views.thread_live, name="thread-live"),
    path("leads/<str:public_id>/send/", views.send, name="send"),
    path("leads/<str:public_id>/done/", views.done, name="done"),
    path("leads/<str:public_id>/next-action/", views.next_action, name="next-action"),
    path("leads/<str:public_id>/reached/", views.reached, name="reached"),
    path("leads/<str:public_id>/hold/", views.hold, name="hold"),
    path("leads/<str:public_id>/calls/", views.call, name="call"),
    path("leads/<str:public_id>/notes/", views.note, name="note"),
    path("leads/<str:public_id>/reassign/", views.reassign, name="reassign"),
    path("leads/<str:public_id>/book/", booking.book, name="book"),
    path("approvals/", deciding.approvals, name="approvals"),
    path("approvals/<str:public_id>/", deciding.approval, name="approval"),
    path("approvals/<str:public_id>/approve/", deciding.approve, name="approve"),
    path("approvals/<str:public_id>/edit/", deciding.edit, name="approve-edited"),
    path("approvals/<str:public_id>/reject/", deciding.reject, name="reject"),
]
