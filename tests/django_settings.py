"""Django settings for the tests of echomq.contrib.django: the test process passes them to
``settings.configure`` (``settings_for``), a worker process reads them as its
DJANGO_SETTINGS_MODULE, with the server's URL in ECHOMQ_DJANGO_URL."""

from __future__ import annotations

import os
from typing import Any


def settings_for(url: str) -> dict[str, Any]:
    return {
        "INSTALLED_APPS": [],
        "USE_TZ": True,
        "TASKS": {
            "default": {
                "BACKEND": "echomq.contrib.django.EchoMQBackend",
                "QUEUES": ["default", "emails"],
                "OPTIONS": {"URL": url, "MAX_ATTEMPTS": 1, "RETRY_DELAY_MS": 0},
            },
            "patient": {
                "BACKEND": "echomq.contrib.django.EchoMQBackend",
                "QUEUES": ["patient"],
                "OPTIONS": {"URL": url, "MAX_ATTEMPTS": 3, "RETRY_DELAY_MS": 0},
            },
        },
    }


if "ECHOMQ_DJANGO_URL" in os.environ:
    globals().update(settings_for(os.environ["ECHOMQ_DJANGO_URL"]))
    DEBUG = True  # as a new project has it: Django's own console handler is on
