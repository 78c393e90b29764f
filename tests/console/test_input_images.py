"""The console shows a run's input images: base64 ones as thumbnails (data: URLs), URL ones as links only; the runs
list says how many images an input has. The playground page offers the image picker."""

from __future__ import annotations

import base64
import re

import pytest

from tests.console.conftest import RUNS, logged_in, run_page, stored_run

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + bytes(1200)
DATA = base64.b64encode(PNG).decode()
URL = "https://images.example.test/cat.png?size=large&x=<b>"
PARTS = [
    {"type": "text", "text": "What is in these?"},
    {"type": "image", "data": DATA, "media_type": "image/png"},
    {"type": "image", "url": URL},
]


def with_images(owner):
    return stored_run(owner, input="What is in these?", input_parts=PARTS)


def test_the_run_page_shows_a_thumbnail_and_a_link(superuser, alice):
    html = logged_in(superuser).get(run_page(with_images(alice))).content.decode()
    (fieldset,) = re.findall(r'<fieldset class="module aligned" id="input-images">.*?</fieldset>', html, re.S)
    (img,) = re.findall(r"<img [^>]*>", fieldset)
    assert f'src="data:image/png;base64,{DATA}"' in img
    assert "1: image/png, 1.2\xa0KB" in fieldset
    escaped = "https://images.example.test/cat.png?size=large&amp;x=&lt;b&gt;"
    assert f'<a href="{escaped}" target="_blank" rel="noopener noreferrer nofollow">{escaped}</a>' in fieldset
    assert f'src="{escaped}"' not in html  # the page loads nothing from the URL


def test_a_run_without_images_has_no_images_section(superuser, alice):
    html = logged_in(superuser).get(run_page(stored_run(alice))).content.decode()
    assert 'id="input-images"' not in html


def test_the_runs_list_counts_an_inputs_images(superuser, alice):
    with_images(alice)
    stored_run(alice, input="plain text")
    html = logged_in(superuser).get(RUNS).content.decode()
    assert "What is in these? [2 images]" in html
    assert "plain text [" not in html


def test_the_playground_offers_the_image_picker_only_when_images_are_on(alice, settings):
    client = logged_in(alice)
    assert 'id="images"' in client.get("/").content.decode()
    settings.AGENT_MAX_IMAGES = 0
    html = client.get("/").content.decode()
    assert 'id="images"' not in html and 'id="followup-images"' not in html
