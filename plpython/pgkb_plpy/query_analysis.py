"""Query analysis for ``kb_retrieve``: deterministic, rule based, explainable.

:func:`analyze` turns a raw query (plus optional earlier turns of the conversation) into a JSON
dict that the retrieval SQL uses to pick a strategy and that ``kb_retrieve_explain`` shows as is.

Keys and the rules behind them:

``original``
    The query without blank characters at either end (:func:`vocabulary.strip_blank`: spaces,
    NBSP, zero-width and other invisible characters), cut to :data:`MAX_QUERY_CHARS`, 2000
    characters, where ``kb_retrieve`` cuts it; so is every context turn: longer input is a
    document, not a query. Only the last :data:`MAX_CONTEXT_TURNS` turns are read (``kb_retrieve``
    refuses more); a blank turn is no turn.
``language``
    ``'zh'``, ``'en'``, ``'mixed'`` or ``'other'``, from the share of letters per script. Han
    ideographs (:data:`pgkb_plpy.vocabulary.HAN`) count as Chinese, Latin letters as English;
    kana, Hangul and other scripts count as other. Letters inside identifiers (``E-4031``,
    ``API_KEY``) do not vote unless the query is nothing else. Chinese (or English) share
    >= 80 % -> ``zh`` (``en``); both present and together >= 80 % -> ``mixed``; anything else, or
    no letters at all -> ``other``.
``normalized``
    The query with question framing removed, repeatedly until nothing changes: trailing
    ``? ？ 。 ! ！ . …``; Chinese ``请问…``, ``什么是X``, ``X是什么``, ``X是什么意思``, ``X什么意思``,
    ``X是啥``, ``如何X``, ``怎么X``, ``怎样X``, ``为什么X``, ``X吗``, ``X呢``, ``X吧``; English
    leading ``what is/are/was/were``, ``what's``, ``what does X mean``, ``how do/can/should I``,
    ``how to``, ``why does/do/is/are``, ``can/could/should I``, ``is/are there``, ``tell me about``,
    ``explain``, ``please`` (and an article right after them). Negated forms (``why doesn't``)
    are left alone. A rule never empties the query; if no rule applies, ``normalized == original``.
``core_terms``
    ``normalized`` reduced to its content: English stop words (:data:`lexical.STOP_WORDS`) and
    Chinese function words and interrogatives (的 了 吗 呢 吧 啊 呀 是 在 和 与 请 请问 一下 什么 怎么
    怎样 如何 为什么 哪些 哪个 哪里) are removed, words that merely contain them (目的, 现在, 是否,
    申请, 参与, ...) are protected, punctuation goes, identifiers are kept verbatim.
``identifiers``
    :func:`lexical.identifiers` of the query.
``is_short``
    Judged on ``normalized``: at most 4 Latin words (an identifier counts as one word) *and* at
    most 6 CJK characters, at least one of either, and no sentence structure, i.e. no clause
    punctuation (``, ; : ! ? ， ； ： ！ ？ 。`` or a full stop followed by a space) inside.
``looks_exact``
    The query is a quoted phrase (``"…"``, ``“…”``, ``「…」``, ``『…』``, ``'…'``), or its core is
    exactly one identifier, or it is short.
``followup``
    True when ``context`` has a non-empty turn and the query refers back with a pronoun or
    demonstrative (它 它们 该 这个 那个 这些 那些 这 那 此 其 上述; it its that this they them their
    those these) *and* has little subject of its own once that reference, the question framing and
    stop words are gone: no identifier, at most 4 Latin content words and at most 10 CJK characters.
    Words that contain those characters without referring back (应该, 因此, 其他, 那么, ...) do not
    count.
``composed``
    For a follow-up: ``"<subject> <follow-up>"``. The subject is that of the last context turn: its
    ``normalized`` form cut before a Chinese interrogative (``退款期限是几天`` -> ``退款期限``) or stripped
    of a leading English wh-phrase (``how long is the``); if that turn was itself a follow-up, the
    subject it inherited. The follow-up is the query with the pronoun (and a 的 right after it)
    removed, trailing punctuation and 吗/呢/吧 stripped: ``['退款期限是几天？'] + '它适用于数字商品吗？'`` ->
    ``'退款期限 适用于数字商品'``; ``['What is the session TTL?'] + 'How do I change it?'`` ->
    ``'session TTL How do I change'``. Otherwise ``None``.
``stages``
    The distinct, non-empty query strings to try in order while evidence is weak:
    ``[original, normalized, core_terms]``, or for a follow-up the same three steps applied to the
    composed query ``[composed, normalized(composed), core_terms(composed)]`` (the bare follow-up
    has no subject and would retrieve noise). The composed query is cut to ``MAX_QUERY_CHARS``
    like any query.
``notes``
    What the analysis changed that the caller should know: a composed follow-up that was cut.
"""

from __future__ import annotations

import re
import unicodedata

from . import lexical
from .vocabulary import HAN, MAX_CONTEXT_TURNS, MAX_QUERY_CHARS, strip_blank

# MAX_QUERY_CHARS is re-exported: callers cut queries where analysis does
__all__ = [
    "MAX_QUERY_CHARS",
    "analyze",
    "core_terms",
    "han_share",
    "normalize_question",
    "passage_language",
    "text_language",
]

_MAX_RULE_PASSES = 8

# -- scripts ----------------------------------------------------------------------------------------

_HAN_RE = re.compile(f"[{HAN}]")
_LATIN_MAX = "\u024f"


def _letter_counts(text: str, skip_identifiers: bool) -> tuple[int, int, int]:
    """(han, latin, other) letter counts, optionally ignoring identifier tokens (linear time)."""
    han = latin = other = 0
    for kind, start, end in lexical.spans(text):
        token = text[start:end]
        if kind == "cjk":
            n_han = len(_HAN_RE.findall(token))
            han += n_han
            other += len(token) - n_han
            continue
        if skip_identifiers and lexical.is_identifier(unicodedata.normalize("NFKC", token)):
            continue
        for ch in token:
            if ch.isalpha():
                if ch <= _LATIN_MAX:
                    latin += 1
                else:
                    other += 1
    return han, latin, other


def text_language(text: str) -> str:
    """The language of a question (or any short text) by its letters: ``'zh'`` or ``'en'`` when
    Han characters or Latin letters make 80 % of them, ``'mixed'`` when the two together do,
    else ``'other'``. Identifiers (``max_connections``, ``P1``) are not counted unless they are
    all the text has: a Chinese question about a setting stays Chinese."""
    han, latin, other = _letter_counts(text, skip_identifiers=True)
    if han + latin + other == 0:
        han, latin, other = _letter_counts(text, skip_identifiers=False)
    total = han + latin + other
    if total == 0:
        return "other"
    if han / total >= 0.8:
        return "zh"
    if latin / total >= 0.8:
        return "en"
    if han and latin and (han + latin) / total >= 0.8:
        return "mixed"
    return "other"


def han_share(text: str) -> float | None:
    """The share of Chinese in a passage as its encoder reads it: Han characters against Han
    characters plus Latin-script words (a Han character and a Latin word are each about one
    token), or None when it has neither. Chinese prose with a few English names and identifiers
    stays near 1; a bilingual passage lands in between."""
    han = latin_words = 0
    for kind, start, end in lexical.spans(text):
        token = text[start:end]
        if kind == "cjk":
            han += len(_HAN_RE.findall(token))
        elif any(ch.isalpha() and ch <= _LATIN_MAX for ch in token):
            latin_words += 1
    total = han + latin_words
    return han / total if total else None


def passage_language(share: float | None) -> str:
    """The language group of a passage from its :func:`han_share`: ``'zh'`` at one half or more,
    ``'en'`` (the Latin-script group) below, ``'other'`` without either script. It is the group
    whose vector statistics correct the dense leg's similarities (``kb.chunks.language``); the
    share itself places a bilingual passage between the groups' moments."""
    if share is None:
        return "other"
    return "zh" if share >= 0.5 else "en"


# -- question forms ---------------------------------------------------------------------------------

_TRAILING_PUNCT_RE = re.compile(r"[\s?？。!！.…~～]+$")
_LEADING_PUNCT_RE = re.compile(r"^[\s,，:：、;；]+")
_ZH_PREFIXES = (
    "请问一下",
    "请问",
    "请教一下",
    "想问一下",
    "我想知道",
    "什么是",
    "什么叫",
    "如何",
    "怎么样",
    "怎么",
    "怎样",
    "为什么",
    "为何",
)
_ZH_SUFFIXES = (
    "是什么意思",
    "是啥意思",
    "什么意思",
    "指的是什么",
    "是指什么",
    "是什么",
    "是啥",
    "怎么样",
    "吗",
    "呢",
    "吧",
)
_ARTICLE = r"(?:(?:the|a|an)\s+)?"
_EN_WHAT_MEAN_RE = re.compile(r"^what\s+(?:does|do)\s+(?P<rest>.+?)\s+(?:mean|stand\s+for|refer\s+to)$", re.IGNORECASE)
_EN_PREFIX_RE = re.compile(
    r"^(?:"
    r"please\s+"
    r"|(?:can|could|would)\s+you\s+(?:please\s+)?(?:tell\s+me\s+about|explain|describe|tell\s+me)\s+"
    r"|(?:tell\s+me\s+about|explain|describe)\s+"
    r"|what(?:'s|\u2019s|\s+is|\s+are|\s+was|\s+were)\s+"
    r"|(?:how|where|when)\s+(?:do|can|should|would|could|shall|must)\s+(?:i|we|you|one)\s+"
    r"|how\s+to\s+"
    r"|why\s+(?:does|do|did|is|are|was|were)\s+"
    r"|(?:can|could|may|should|shall|must)\s+(?:i|we)\s+"
    r"|(?:is|are)\s+there\s+(?:any\s+)?"
    rf"){_ARTICLE}",
    re.IGNORECASE,
)


def _strip_trailing(text: str) -> str:
    return _TRAILING_PUNCT_RE.sub("", text.strip())


def _normalize_once(text: str) -> str:
    text = _strip_trailing(text)
    for prefix in _ZH_PREFIXES:
        if text.startswith(prefix) and text[len(prefix) :].strip():
            return _LEADING_PUNCT_RE.sub("", text[len(prefix) :])
    for suffix in _ZH_SUFFIXES:
        if text.endswith(suffix) and text[: -len(suffix)].strip():
            return text[: -len(suffix)].rstrip()
    match = _EN_WHAT_MEAN_RE.match(text)
    if match:
        return match.group("rest")
    match = _EN_PREFIX_RE.match(text)
    if match and text[match.end() :].strip():
        return text[match.end() :]
    return text


def normalize_question(query: str) -> str:
    """``query`` with the question framing removed (see the module docstring)."""
    original = strip_blank(query)
    text = original
    for _ in range(_MAX_RULE_PASSES):
        new = _normalize_once(text)
        if new == text:
            break
        text = new
    text = text.strip()
    return text or original


# -- core terms -------------------------------------------------------------------------------------

# Words containing a function character that must survive (matched first, left to right).
_ZH_PROTECTED = (
    "目的 的确 了解 为了 除了 了结 明了 了不起 是否 但是 于是 就是 还是 总是 只是 可是 凡是 正是 要是 "
    "若是 不是 是非 现在 存在 正在 在线 实在 内在 所在 潜在 外在 自在 在于 好在 不在 在意 在职 在场 "
    "和平 总和 温和 缓和 调和 和谐 和解 平和 柔和 暖和 参与 与会 给与 请求 申请 邀请 请假 聘请 请示 "
    "请款 请购 吗啡 呢子 呢绒 一下子 酒吧 网吧 吧台 什么样"
).split()
_ZH_FUNCTION = (
    "请问 一下 为什么 怎么样 怎么 怎样 如何 什么 哪些 哪个 哪里 的 了 吗 呢 吧 啊 呀 嘛 是 在 和 与 请"
).split()


def _alternation(words: list[str] | tuple[str, ...]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


_ZH_FUNCTION_RE = re.compile(rf"(?P<keep>{_alternation(_ZH_PROTECTED)})|(?P<drop>{_alternation(_ZH_FUNCTION)})")


def _strip_zh_function_words(run: str) -> list[str]:
    cleaned = _ZH_FUNCTION_RE.sub(lambda m: m.group("keep") or " ", run)
    return cleaned.split()


def core_terms(text: str) -> str:
    """The content of ``text``: stop words, function words and punctuation removed."""
    # invisible format characters join what they split, as in the term rules
    text = lexical.strip_format(text or "")
    pieces: list[str] = []
    for kind, start, end in lexical.spans(text):
        token = text[start:end]
        if kind == "cjk":
            pieces.extend(_strip_zh_function_words(token))
        elif lexical.is_identifier(unicodedata.normalize("NFKC", token)):
            pieces.append(token)
        elif any(part.lower() not in lexical.STOP_WORDS for part in re.split(r"[-_.:/]", token)):
            pieces.append(token)
    return " ".join(pieces)


# -- shape ------------------------------------------------------------------------------------------

_CLAUSE_PUNCT_RE = re.compile(r"[,;:!?，；：！？。]|\.\s")
_QUOTED_RE = re.compile(r"^(?:\"[^\"]+\"|“[^”]+”|「[^」]+」|『[^』]+』|'[^']+')$")


def _shape(text: str) -> tuple[int, int]:
    """(Latin words, CJK characters) of ``text``."""
    words = cjk = 0
    for kind, start, end in lexical.spans(text):
        if kind == "cjk":
            cjk += end - start
        else:
            words += 1
    return words, cjk


def _is_short(normalized: str) -> bool:
    words, cjk = _shape(normalized)
    if words + cjk == 0 or words > 4 or cjk > 6:
        return False
    return _CLAUSE_PUNCT_RE.search(_strip_trailing(normalized)) is None


# -- follow-ups -------------------------------------------------------------------------------------

_ZH_NOT_PRONOUN = (
    "应该 活该 该死 因此 此外 如此 彼此 从此 由此 其他 其它 其实 尤其 极其 与其 其次 那么 这么 刹那"
).split()
_ZH_PRONOUNS = "它们 它 上述 这个 那个 这些 那些 这 那 此 其 该".split()
_ZH_PRONOUN_RE = re.compile(
    rf"(?P<keep>{_alternation(_ZH_NOT_PRONOUN)})|(?P<pronoun>(?:{_alternation(_ZH_PRONOUNS)})的?)"
)
_EN_PRONOUN_RE = re.compile(
    r"(?<![\w'’-])(?:it|its|that|this|they|them|their|those|these)(?:['’]s)?(?![\w'’-])", re.IGNORECASE
)
_ZH_FINAL_PARTICLES_RE = re.compile(r"[吗呢吧]+$")
_EN_SUBJECT_RE = re.compile(
    r"^(?:how\s+(?:long|many|much|often|far|big|soon|old)|what|which|who|when|where|why|how)\s+"
    r"(?:is|are|was|were|do|does|did|can|should|will|would)\s+" + _ARTICLE,
    re.IGNORECASE,
)
_ZH_SUBJECT_RE = re.compile(
    r"^(?P<subject>.+?)(?:是|有|为|要|需要|能|可以|会)?(?:几|多少|多久|多长|多大|什么|啥|哪|怎么|如何|谁)"
)
_MAX_SUBJECT_CHARS = 40


def _remove_references(query: str) -> tuple[str, bool]:
    """The query without its back-references, and whether it had any."""
    found = False

    def zh(match: re.Match[str]) -> str:
        nonlocal found
        if match.group("keep"):
            return match.group("keep")
        found = True
        return " "

    text = _ZH_PRONOUN_RE.sub(zh, query)
    text, count = _EN_PRONOUN_RE.subn(" ", text)
    found = found or count > 0
    text = re.sub(r"\s+", " ", text)
    text = _ZH_FINAL_PARTICLES_RE.sub("", _strip_trailing(text)).strip()
    text = _ZH_FINAL_PARTICLES_RE.sub("", _strip_trailing(text)).strip()
    return _LEADING_PUNCT_RE.sub("", text), found


def _followup_rest(query: str, elliptical: bool = True) -> str | None:
    """The follow-up with its reference removed, or None when ``query`` is not a follow-up.
    ``elliptical`` also accepts a very short question without a reference (only for
    the question being asked, not for earlier turns)."""
    rest, found = _remove_references(query)
    if lexical.identifiers(query):
        return None
    words, cjk = _shape(core_terms(normalize_question(rest)))
    if found:
        return rest if words <= 4 and cjk <= 10 else None
    if not elliptical:
        return None
    # No explicit reference, but elliptical ("when is the handover?", "退货呢？"):
    # at most two content words still lean on the earlier turn for their subject.
    return rest if words + cjk // 2 <= 2 and cjk <= 4 else None


def _subject(turn: str) -> str:
    text = normalize_question(turn)
    match = _ZH_SUBJECT_RE.match(text)
    if match and any(_HAN_RE.match(c) for c in match.group("subject")):
        text = match.group("subject").rstrip("的 ")
    else:
        text = _EN_SUBJECT_RE.sub("", text, count=1)
    text = _strip_trailing(text)
    if len(text) > _MAX_SUBJECT_CHARS:
        text = core_terms(text)
    return text


def _context_subject(context: list[str] | None) -> str | None:
    subject: str | None = None
    for turn in context or []:
        turn = strip_blank(turn) if isinstance(turn, str) else ""
        if not turn:
            continue
        if subject and _followup_rest(turn, elliptical=False) is not None:
            continue  # a follow-up keeps the subject it referred to
        subject = _subject(turn) or subject
    return subject


# -- entry point ------------------------------------------------------------------------------------


def _distinct(items: list[str | None]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        if item and strip_blank(item):
            seen.setdefault(strip_blank(item), None)
    return list(seen)


def analyze(query: str, context: list[str] | None = None) -> dict:
    """Analyse ``query`` (with earlier turns ``context``, oldest first); see the module docstring."""
    original = strip_blank(query)[:MAX_QUERY_CHARS]
    if isinstance(context, str):
        context = [context]
    turns = [turn for turn in context or [] if isinstance(turn, str)][-MAX_CONTEXT_TURNS:]
    context = [strip_blank(turn)[:MAX_QUERY_CHARS] for turn in turns]
    idents = lexical.identifiers(original)
    normalized = normalize_question(original)
    core = core_terms(normalized)
    is_short = _is_short(normalized)
    core_is_identifier = bool(core) and core in idents
    looks_exact = bool(_QUOTED_RE.match(original)) or core_is_identifier or is_short

    composed: str | None = None
    notes: list[str] = []
    subject = _context_subject(context)
    rest = _followup_rest(original) if subject else None
    if subject and rest is not None:
        # cut where the query is cut: every step after analysis holds a question to that bound
        composed = f"{subject} {rest}".strip()
        if len(composed) > MAX_QUERY_CHARS:
            notes.append(
                f"the follow-up question composed with the earlier turn cut to its first {MAX_QUERY_CHARS} "
                f"of {len(composed)} characters"
            )
            composed = composed[:MAX_QUERY_CHARS]
        stages = _distinct([composed, normalize_question(composed), core_terms(normalize_question(composed))])
    else:
        stages = _distinct([original, normalized, core])

    return {
        "original": original,
        "language": text_language(original),
        "is_short": is_short,
        "identifiers": idents,
        "looks_exact": looks_exact,
        "normalized": normalized,
        "core_terms": core,
        "followup": composed is not None,
        "composed": composed,
        "stages": stages,
        "notes": notes,
    }
