from tags import tag_cloud, tag_slug, unique_tags


def test_unique_tags_keep_the_authors_order() -> None:
    tags = ["python", "testing", "ci", "python", "agents", "ci"]
    assert unique_tags(tags) == ["python", "testing", "ci", "agents"]


def test_unique_tags_of_no_tags() -> None:
    assert unique_tags([]) == []


def test_tag_slug() -> None:
    assert tag_slug("GitHub Actions") == "github-actions"
    assert tag_slug("  C++ / Rust ") == "c-rust"


def test_tag_cloud_counts_posts() -> None:
    assert tag_cloud([["python", "ci"], ["Python", "llm"], ["ci", "CI"]]) == {"python": 2, "ci": 2, "llm": 1}
