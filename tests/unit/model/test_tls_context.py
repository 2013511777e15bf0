"""The httpx clients of the direct route share one TLS context, and it verifies certificates and host names."""

from __future__ import annotations

import asyncio
import ssl

from prime_ci.model.providers import OpenAICompatModel, tls_context


def test_one_verifying_context_for_every_client() -> None:
    context = tls_context()
    assert context is tls_context(), "built once a process"
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0, "a CA bundle is loaded"
    models = [OpenAICompatModel("openai/m", f"https://example.invalid/{i}/v1") for i in range(2)]
    try:
        pools = [m._client._transport._pool for m in models]  # type: ignore[attr-defined]
        assert all(pool._ssl_context is context for pool in pools)
    finally:
        for m in models:
            asyncio.run(m._client.aclose())
