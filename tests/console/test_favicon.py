"""The site has an icon (issue 34): `/favicon.ico`, which browsers ask every site for, answers one, and every page —
the playground, the login page, the console — links the SVG one."""

from __future__ import annotations

import re
import struct
from xml.etree import ElementTree

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def test_favicon_ico_is_an_icon(client):
    response = client.get("/favicon.ico")

    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon"
    assert "max-age=" in response["Cache-Control"]
    body = response.content
    reserved, kind, count = struct.unpack("<HHH", body[:6])
    assert (reserved, kind, count) == (0, 1, 1)  # an ICO file with one image
    width, height, *_, size, offset = struct.unpack("<BBBBHHII", body[6:22])
    assert (width, height) == (32, 32) and offset + size == len(body)
    assert body[offset : offset + 8] == b"\x89PNG\r\n\x1a\n"


def test_favicon_ico_needs_no_login_and_takes_head_only_besides_get(client):
    assert client.head("/favicon.ico").status_code == 200
    assert client.post("/favicon.ico").status_code == 405


def icon_links(html: str) -> list[str]:
    return re.findall(r'<link rel="icon" type="image/svg\+xml" href="([^"]+)">', html)


@pytest.mark.parametrize("page", ["/", "/accounts/login/", "/admin/", "/admin/agents/run/", "/admin/login/"])
def test_every_page_links_the_svg_icon(page):
    admin = make_user("root", staff=True, superuser=True)
    browser = Client()
    if page != "/accounts/login/" and page != "/admin/login/":
        browser.force_login(admin)

    response = browser.get(page)

    assert response.status_code == 200, page
    links = icon_links(response.content.decode())
    assert links == ["/static/agents/favicon.svg"], links
    svg = finders.find("agents/favicon.svg")
    assert svg, "the linked file is a static file of the app"
    assert ElementTree.parse(svg).getroot().tag == "{http://www.w3.org/2000/svg}svg"
