"""Tags of blog posts: the list under a post, URL slugs and the tag cloud."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

_NOT_SLUG = re.compile(r"[^a-z0-9]+")


def unique_tags(tags: Iterable[str]) -> list[str]:
    """The tags to show under a post: each tag once, in the order the author wrote them."""
    return sorted(set(tags))


def tag_slug(tag: str) -> str:
    """'GitHub Actions' -> 'github-actions' (the tag's URL)."""
    return _NOT_SLUG.sub("-", tag.lower()).strip("-")


def tag_cloud(posts: Iterable[Iterable[str]]) -> dict[str, int]:
    """How many posts use each tag slug."""
    return dict(Counter(slug for tags in posts for slug in {tag_slug(t) for t in tags}))
