"""Answer types: what kind of value a question asks for, and whether a passage holds one bound to
what was asked about.

A question that asks for a price, a duration, a date, a count, a person, a place or a phone number
is answered only by a passage holding a value of that type *in the clause, sentence or table row
that carries the question's subject*. A value of the type elsewhere in the passage (another
contract's discount, a supplier's deadline, a legacy phone number) does not answer it. Retrieval
scores cannot tell the two apart (both legs find the right document), so the judge step of
``kb_retrieve`` asks :func:`bound_value` about the top passages of a typed question.

Deterministic, rule based, no labels:

:func:`answer_type`
    ``'price' 'duration' 'date' 'count' 'person' 'name' 'place' 'phone'`` or ``None``. English reads
    the question's leading wh-phrase (``how much … cost``, ``how long``, ``how many``, ``when``,
    ``who``, ``where``, ``what is the price/name/phone number…``), so an embedded ``who is calling``
    types nothing; Chinese needs an interrogative in place (多少 几 多久 多长 谁 哪 什么时候 何时), so
    a yes/no question (``费用能报销吗``) types nothing. Claims and keyword queries type nothing and keep
    the rule of the scores alone.
:func:`subject_terms`
    The question's BM25 terms (:func:`pgkb_plpy.lexical.query_terms` of its core terms) without the
    answer-type cue and interrogatives: what the value must be bound to.
:func:`bound_value`
    The best value of the type in a unit (sentence or table row, with its section heading and the
    table's header row) holding at least :data:`MIN_SUBJECT_SHARE` of the subject terms; ``None``
    when there is none. A passage in the other language (``zh`` against ``en``) cannot be bound by
    terms: any value of the type in it counts (``binding: 'not checked (other language)'``).
"""

from __future__ import annotations

import functools
import re

from . import lexical
from .query_analysis import core_terms, han_share, passage_language, text_language

__all__ = ["MIN_SUBJECT_SHARE", "TYPES", "answer_type", "bound_value", "subject_terms", "values"]

TYPES = ("price", "duration", "date", "count", "person", "name", "place", "phone")
#: Types whose values are words, not digits: another language writes them otherwise.
OPEN_TYPES = ("person", "name", "place")

#: A unit is about the question's subject when it holds at least this share of its distinct terms.
#: One half: a sentence naming the subject's head and one qualifier, not merely one shared word.
MIN_SUBJECT_SHARE = 0.5

#: What one call reads at most (the caller sends a few passages; a chunk is far shorter).
MAX_PASSAGES = 10
MAX_PASSAGE_CHARS = 20000
MAX_UNITS = 400
MAX_CLAUSE_CHARS = 200

# -- the question's answer type ---------------------------------------------------------------------

_EN_LEAD = (
    r"^(?:(?:and|so|but|also|then|ok|okay|please|tell me|do you know)[\s,]+)*"
    r"(?:(?:after|before|for|within|in|by|at|on|to|until|from|about|roughly|approximately)\s+)?"
)
_EN_RULES: list[tuple[str, re.Pattern[str]]] = [
    (
        "price",
        re.compile(
            _EN_LEAD + r"(?:how much\b(?=.*\b(?:cost|costs|charge|charged|pay|paid|price|priced|fee|fees|spend|spent|"
            r"money|budget|salary|stipend|allowance|reimburse\w*|worth|bill|billed)\b)|how much money\b|"
            r"what (?:is|are|was|were) the (?:\w+[\s-]+){0,3}"
            r"(?:price|cost|fee|fees|charge|salary|stipend|allowance|budget)s?\b|what do (?:we|i|you|they) pay\b|"
            r"what does (?:it|\w+(?:\s+\w+){0,4}) cost\b)",
            re.I,
        ),
    ),
    (
        "duration",
        re.compile(
            _EN_LEAD
            + r"(?:how long\b|how often\b|how many (?:\w+\s+)?(?:days|weeks|months|years|hours|minutes|seconds|"
            r"business days|working days)\b|what (?:is|are) the (?:\w+[\s-]+){0,3}(?:period|duration|deadline|window|"
            r"timeout|ttl|lifetime|notice period|retention period)s?\b)",
            re.I,
        ),
    ),
    (
        "date",
        re.compile(_EN_LEAD + r"(?:when\b|what (?:date|day|time|year|month)\b|which (?:date|day|year|month)\b)", re.I),
    ),
    (
        "name",
        re.compile(_EN_LEAD + r"(?:what(?:'s| is| are) (?:the )?names? of\b|what is (?:his|her|their) name\b)", re.I),
    ),
    (
        "person",
        re.compile(_EN_LEAD + r"(?:who\b|whom\b|whose\b|which (?:person|people|team|role|manager|employee)s?\b)", re.I),
    ),
    (
        "phone",
        re.compile(
            _EN_LEAD + r"(?:what|which) (?:\w+\s+){0,2}(?:phone|telephone|hotline|fax) (?:number|line)s?\b", re.I
        ),
    ),
    (
        "place",
        re.compile(
            _EN_LEAD + r"(?:where\b|(?:in |on )?(?:which|what) (?:city|country|region|floor|building|room|office|"
            r"data ?cent(?:er|re)|site|location|address)\b)",
            re.I,
        ),
    ),
    ("count", re.compile(_EN_LEAD + r"(?:how many\b|how much\b|what (?:number|percentage|share|rate) of\b)", re.I)),
]

_ZH_INTERROGATIVE = re.compile(r"多少|几|多久|多长|谁|哪|什么时候|何时|何地")
_ZH_RULES: list[tuple[str, re.Pattern[str]]] = [
    (
        "price",
        re.compile(
            r"(?:付|交|花|给|收|赔|退)?多少钱|几块钱|(?:价格|价钱|费用|收费|花费|报价|金额|成本|预算|补贴|补助|餐补|津贴|工资|薪水|薪资|月薪|年薪|报销额|额度|标准)"
            r"[^，。？！?]{0,6}(?:是|有|为|要|给)?多少|(?:付|交|花|给|补贴|报销|收|赔|退)多少|多少(?:费用|补贴|津贴|工资|元|块)"
        ),
    ),
    (
        "duration",
        re.compile(
            r"多久|多长时间|多长|几(?:个)?(?:天|日|周|星期|礼拜|月|年|小时|钟头|分钟|秒|工作日)|"
            r"多少(?:个)?(?:天|日|周|星期|月|年|小时|钟头|分钟|秒|工作日)"
        ),
    ),
    ("date", re.compile(r"什么时候|何时|哪天|哪一天|几号|几月|哪年|哪一年|几点|什么时间|哪个时间|截止到哪")),
    ("name", re.compile(r"叫什么(?:名字)?|姓名|名字是")),
    ("person", re.compile(r"谁|哪位|什么人|哪个人|哪个部门|哪个团队")),
    ("phone", re.compile(r"(?:电话|热线|号码)[^，。？！?]{0,4}(?:是)?(?:多少|什么)|拨打?(?:什么|哪个)")),
    (
        "place",
        re.compile(
            r"在?哪(?:个|座|一)?(?:城市|国家|省|地区|机房|数据中心|楼|层|地方|区域|里|儿)|在哪|几楼|几层|什么地方|什么位置"
        ),
    ),
    ("count", re.compile(r"多少|几(?:次|个|位|家|份|条|台|项|张|笔|件|人|名|种|级)|几")),
]


def answer_type(question: str | None) -> str | None:
    """The type of value ``question`` asks for (one of :data:`TYPES`), or ``None``."""
    found = _typed(question)
    return found[0] if found else None


def _typed(question: str | None) -> tuple[str, str] | None:
    """The answer type and the cue that gave it (to be removed from the subject)."""
    text = (question or "").strip()[:2000]
    if not text:
        return None
    language = text_language(text)
    if language in ("zh", "mixed") and _ZH_INTERROGATIVE.search(text):
        for kind, pattern in _ZH_RULES:
            m = pattern.search(text)
            if m:
                return kind, m.group(0)
    if language in ("en", "mixed"):
        # a question's own clauses: "…, and for how long?" asks too
        for clause in re.split(r"[,;:]\s*|\s+-\s+", text):
            for kind, pattern in _EN_RULES:
                m = pattern.search(clause.strip())
                if m:
                    return kind, m.group(0)
    return None


_EN_CUE_WORDS = set(
    "how much many long often when who whom whose where what which is are was were do does did the a an "
    "cost costs price fee fees pay paid charge money name names number phone telephone hotline date day time "
    "period duration deadline window city country region floor building room office location address".split()
)


# Chinese words that carry no subject (modal verbs, degree words, measure words left by a cue):
# removed before the bigrams are made, so no bigram spans them
_ZH_GENERIC_RE = re.compile(
    r"可以|能够|应该|需要|必须|一般|通常|大概|大约|最多|最少|至少|以内|以上|以后|之后|之前|以前|时候|目前|现在|"
    r"才算|才能|还要|还能|的话|这份|这个|那个|我们|他们|公司|[要能会可得把被给让该还才就都也又再个钱有是了吗呢吧]"
)


def subject_terms(question: str | None) -> list[str]:
    """The question's content terms without the answer-type cue: what a value must be bound to."""
    text = (question or "")[:2000]
    found = _typed(text)
    if found:
        text = text.replace(found[1], " ", 1)
    text = _ZH_INTERROGATIVE.sub(" ", text)
    text = _ZH_GENERIC_RE.sub(" ", text)
    core = core_terms(text)
    words = [w for w in re.split(r"\s+", core) if w and w.lower() not in _EN_CUE_WORDS]
    terms = lexical.query_terms(" ".join(words))
    return list(dict.fromkeys(terms))


# -- values of each type ----------------------------------------------------------------------------

_NUM = r"(?<![A-Za-z0-9_\-/.#])\d+(?:[,，]\d{3})*(?:\.\d+)?(?![_/][A-Za-z0-9]|-\d)"
_CN_NUM = r"[零一二两三四五六七八九十百千万半]+"
# numbers written out ("kept for thirty days"), as policies often do
_EN_NUM = (
    r"\b(?:an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|"
    r"forty-five|fifty|sixty|ninety|hundred)\b"
)
_ANY_NUM = rf"(?:{_NUM}|{_CN_NUM}|{_EN_NUM})"
_RANGE = rf"{_ANY_NUM}(?:\s*(?:-|–|~|～|至|到|to|or|或)\s*{_ANY_NUM})?"

_CURRENCIES = r"元|块钱|块|美元|欧元|英镑|港币|人民币|yuan|RMB|CNY|USD|EUR|GBP|dollars?|euros?|pounds?"
_CURRENCY_AFTER = rf"(?:万|千|百|k|K|m|M)?\s*(?:{_CURRENCIES})"
_PRICE = (
    rf"(?:[¥￥$€£]|RMB|CNY|USD|EUR|GBP)\s*{_NUM}(?:\s*(?:万|千|k|K|m|M)\b)?|{_RANGE}\s*{_CURRENCY_AFTER}|"
    r"免费|不收费|free of charge|at no (?:extra )?cost|no charge|\bfree\b"
)
_DURATION_UNIT = (
    r"(?:个)?(?:工作日|自然日|天|日|周|星期|个月|年|小时|钟头|分钟|秒)|\s*(?:business |working |calendar )?"
    r"(?:days?|weeks?|months?|years?|hours?|hrs?|minutes?|mins?|seconds?|secs?|h|d|min|s|ms)\b"
)
_DURATION = (
    rf"{_RANGE}[\s-]*(?:{_DURATION_UNIT})|半(?:个)?(?:小时|天|年|个月)|"
    r"\b(?:an? |one )?(?:hour|day|week|month|year)\b(?= (?:later|before|after|of|from))|"
    r"\b(?:annually|yearly|monthly|weekly|daily|hourly|quarterly|every (?:day|week|month|quarter|year))\b|"
    r"每(?:天|日|周|星期|月|季度|年|小时)|immediately|立即|立刻|当天|当日|same day"
)
_MONTHS = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|"
    r"Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
_DATE = (
    r"\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{4}\s*年(?:\s*\d{1,2}\s*月(?:\s*\d{1,2}\s*[日号])?)?|\d{1,2}\s*月\s*\d{1,2}\s*[日号]|"
    rf"\b{_MONTHS}\.? \d{{1,2}}(?:st|nd|rd|th)?(?:,? \d{{4}})?\b|"
    rf"\b\d{{1,2}}(?:st|nd|rd|th)? (?:of )?{_MONTHS}\b|\b{_MONTHS} \d{{4}}\b|"
    r"\b(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day\b|(?:周|星期|礼拜)[一二三四五六日天]|\b\d{1,2}:\d{2}\b|"
    r"(?:上午|下午|晚上|凌晨|早上)?\s*\d{1,2}\s*(?:点|时)(?:半|\d{1,2}分)?|\bQ[1-4]\b|月底|月初|月末|年底|年初|季度末|"
    r"\bend of (?:the )?(?:day|week|month|quarter|year)\b|\b(?:19|20)\d{2}\b"
)
_PERCENT = rf"{_ANY_NUM}\s*(?:%|％|percent|per cent|个百分点)|百分之{_CN_NUM}"
_COUNT = (
    rf"{_PERCENT}|{_NUM}|{_CN_NUM}\s*(?:个|次|位|家|份|条|台|项|张|笔|件|人|名|种|级|倍|遍)|"
    r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|fifty|hundred|once|twice)\b"
)
_ROLE_EN = (
    r"\b(?:(?:engineering|product|support|account|finance|legal|hiring|line|project|program|release|incident|duty|"
    r"on-call|team|general|country|regional|office|security|site)\s+)?(?:manager|director|lead|head|owner|officer|approver|"
    r"supervisor|commander|administrator|admin|committee|board|CEO|CFO|CTO|COO|CISO|VP|vice president|president|"
    r"chair|founder|engineer|agent|coordinator|controller|team)s?\b"
)
_ROLE_ZH = (
    r"(?:财务|法务|人事|人力资源|行政|客服|销售|技术|研发|部门|直属|合同|项目|运维|安全)?"
    r"(?:总经理|经理|主管|总监|负责人|副总裁|副总|总裁|董事|部长|组长|主任|专员|工程师|值班|审批人|委员会|团队|老板|上级|领导|"
    r"处长|科长|店长|合伙人)|财务部|法务部|人事部|CEO|CFO|CTO|COO"
)
_NAME_EN = r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+ (?:[A-Z]\. )?[A-Z][a-z]+\b(?!-)|@[A-Za-z][\w.-]+"
_NAME_ZH = (
    r"(?<![\u4e00-\u9fff])[王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘蒋蔡余杜叶程苏魏吕丁"
    r"任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦方白邹孟熊秦邱江尹薛段雷侯龙史陶黎贺顾毛郝龚邵钱严武戴莫孔汤][\u4e00-\u9fff]{1,2}"
    r"(?=[，。、；（(\s]|先生|女士|老师|经理|总)"
)
_PERSON = rf"{_ROLE_EN}|{_ROLE_ZH}|{_NAME_EN}|{_NAME_ZH}"
_NAME = rf"{_NAME_EN}|{_NAME_ZH}"
_CITIES = (
    r"北京|上海|广州|深圳|杭州|成都|南京|武汉|西安|苏州|天津|重庆|香港|澳门|台北|新加坡|东京|首尔|法兰克福|伦敦|纽约|硅谷|"
    r"\b(?:Beijing|Shanghai|Guangzhou|Shenzhen|Hangzhou|Chengdu|Nanjing|Wuhan|Xi'an|Suzhou|Tianjin|Chongqing|Hong Kong|"
    r"Singapore|Tokyo|Seoul|Frankfurt|London|Paris|Dublin|Amsterdam|New York|San Francisco|Seattle|Virginia|Oregon|"
    r"Ohio|Sydney|Mumbai|Berlin)\b"
)
_PLACE = (
    rf"{_CITIES}|[\u4e00-\u9fff]{{1,6}}(?:市|省|区|县|镇|路|街|大厦|大楼|园区|机房|数据中心|会议室|办公室)|"
    rf"{_ANY_NUM}\s*(?:楼|层|号楼|室)|\b\d+(?:st|nd|rd|th) floor\b|\b(?:floor|room|building|suite) \w+\b|"
    r"\b[a-z]{2}-[a-z]+-\d\b|\b(?:data ?cent(?:er|re)|region|office|warehouse|headquarters|HQ|campus) in \b[A-Z]\w+"
)
_PHONE = (
    r"(?<![\w-])(?:\+\d{1,3}[\s-]?)?(?:\(\d{2,4}\)\s?)?\d{3,4}[\s-]\d{3,4}(?:[\s-]\d{3,4})?(?![\w-])|"
    r"(?<![\w-])(?:400|800)\d{7}(?![\w-])|(?<![\w-])1[3-9]\d{9}(?![\w-])|\bext\.? ?\d{2,5}\b|分机\s*\d{2,5}"
)
# The sources of each type's value patterns, compiled on first use (:func:`_value_patterns`): a
# backend that never checks an answer type does not pay for them.
_VALUE_SOURCES: dict[str, list[str]] = {
    "price": [_PRICE],
    "duration": [_DURATION],
    # "when" is often answered by a window ("within 7 days of purchase")
    "date": [_DATE, _DURATION],
    "count": [_COUNT],
    "person": [_PERSON],
    "name": [_NAME],
    "place": [_PLACE],
    "phone": [_PHONE],
}


@functools.cache
def _value_patterns(kind: str) -> list[re.Pattern[str]]:
    return [re.compile(source) for source in _VALUE_SOURCES.get(kind, [])]


def values(kind: str, text: str) -> list[str]:
    """The values of type ``kind`` in ``text``, in order."""
    found: list[tuple[int, str]] = []
    for pattern in _value_patterns(kind):
        found.extend((m.start(), m.group(0).strip()) for m in pattern.finditer(text) if m.group(0).strip())
    return [v for _, v in sorted(found)]


# -- units of a passage -----------------------------------------------------------------------------

_HEADING_RE = re.compile(r"^\s*#{1,6}\s+(.*)$")
_TABLE_RULE_RE = re.compile(r"^\s*\|?\s*:?-{2,}")
_SENTENCE_RE = re.compile(r"(?<=[。！？；])|(?<=[.!?;])\s+(?=[A-Z0-9\"'“(\[*`-])")


def units(passage: str) -> list[tuple[str, str]]:
    """The passage cut into units (a sentence, or a table row), each with its context (the nearest
    heading above it, and a row's table header)."""
    out: list[tuple[str, str]] = []
    heading = ""
    header = ""
    in_table = False
    for line in passage[:MAX_PASSAGE_CHARS].splitlines():
        stripped = line.strip()
        if not stripped:
            in_table = False
            continue
        m = _HEADING_RE.match(stripped)
        if m:
            heading, in_table = m.group(1), False
            continue
        if stripped.startswith("|"):
            if _TABLE_RULE_RE.match(stripped):
                continue
            if not in_table:
                header, in_table = stripped, True
                continue
            out.append((stripped, f"{heading} {header}"))
            continue
        in_table = False
        for sentence in _SENTENCE_RE.split(stripped):
            if sentence.strip():
                out.append((sentence.strip(), heading))
        if len(out) >= MAX_UNITS:
            break
    return out[:MAX_UNITS]


def _subject_marks(terms: list[str]) -> set[str]:
    """What binding compares: a word term as is, a CJK bigram as its two characters. Without word
    segmentation half the bigrams of a Chinese question span two words (供应商签 gives 商签) and
    never occur in the answer, so bigram shares punish Chinese; characters do not."""
    marks: set[str] = set()
    for term in terms:
        if len(term) == 2 and all(lexical.is_cjk(ch) for ch in term):
            marks.update(term)
        else:
            marks.add(term)
    return marks


_LATIN_WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.+-]*")


def _plain(text: str) -> str:
    return text.lower().replace(",", "").replace("，", "")


def anchors(question: str | None) -> list[str]:
    """What reads the same in a Chinese and an English passage: the question's identifiers and,
    for a Chinese question, its Latin words (product names, P1, Tier). An English question's
    words are not anchors (the Chinese passage translates them), nor are numbers: a question's
    number is often a condition (a refund of 60,000 yuan) that the passage states as a threshold
    (above 50,000), or writes another way (20 万)."""
    text = (question or "")[:2000]
    found = [i.lower() for i in lexical.identifiers(text)]
    if text_language(text) in ("zh", "mixed"):
        found += [w.lower() for w in _LATIN_WORD_RE.findall(text)]
    return list(dict.fromkeys(found))


def _language_of(text: str) -> str:
    return passage_language(han_share(text))


def bound_value(kind: str | None, question: str | None, passage: str | None) -> dict | None:
    """A value of type ``kind`` bound to the question's subject in ``passage``, or ``None``.

    Returns ``{"value", "clause", "coverage", "binding"}``: the value, the unit it stands in (cut
    to :data:`MAX_CLAUSE_CHARS`), the share of the subject's terms that unit and its context hold,
    and how it was bound (``'clause'``, ``'no subject terms'`` or ``'not checked (other
    language)'``)."""
    if kind not in TYPES or not passage:
        return None
    question = (question or "")[:2000]
    passage = passage[:MAX_PASSAGE_CHARS]
    subject = subject_terms(question)
    question_language = text_language(question)
    other_language = question_language in ("zh", "en") and _language_of(passage) != question_language
    # an identifier names one thing exactly, in any language: a value next to another
    # contract's number is about that contract
    named = [i.lower() for i in lexical.identifiers(question)]
    if named and not all(i in passage.lower() for i in named):
        return None
    if not subject or other_language:
        found = values(kind, passage)
        if not found:
            return None
        binding = "not checked (other language)" if other_language else "no subject terms"
        return {"value": found[0], "clause": None, "coverage": None, "binding": binding}
    wanted = _subject_marks(subject)
    best: dict | None = None
    for unit, context in units(passage):
        found = values(kind, unit)
        if not found:
            continue
        if named and not all(i in f"{unit} {context}".lower() for i in named):
            continue
        held = wanted & _subject_marks(lexical.query_terms(f"{unit} {context}"))
        coverage = len(held) / len(wanted)
        if coverage >= MIN_SUBJECT_SHARE and (best is None or coverage > best["coverage"]):
            best = {
                "value": found[0],
                "clause": unit[:MAX_CLAUSE_CHARS],
                "coverage": round(coverage, 3),
                "binding": "clause",
            }
    return best


def check(kind: str | None, question: str | None, passages: list[str | None] | None) -> dict:
    """The judge's reading of the top passages (in the fused ranking's order):
    ``{"answer_type", "subject_terms", "passages_read", "bound"}`` with ``bound`` the first bound
    value (its passage's place as ``passage``, 1-based) or ``None``.

    A passage in the other language cannot be bound by terms. In first place, where the fused
    ranking vouches for it, any value of the type in it counts; for a person, a name or a place
    (:data:`OPEN_TYPES`, written with words another language translates or transliterates) it is
    not checked at all. Further down it counts when it holds a value of the type and the
    question's anchors that read the same in both languages (:func:`anchors`: identifiers, the
    Latin words of a Chinese question); without anchors it does not: it is a neighbour of the
    answer at best, and a value of the type there is exactly the decoy this check is for."""
    subject = subject_terms(question)
    marks = anchors(question)
    result: dict = {"answer_type": kind, "subject_terms": subject, "passages_read": 0, "bound": None}
    if kind not in TYPES:
        return result
    question_language = text_language((question or "")[:2000])
    for place, passage in enumerate((passages or [])[:MAX_PASSAGES], start=1):
        result["passages_read"] = place
        if place == 1 and kind in OPEN_TYPES and question_language in ("zh", "en"):
            if _language_of(passage or "") != question_language:
                # a cross-lingual answer in first place: names and places are transliterated or
                # translated, which the value patterns cannot read; the scores' rule decides
                result["bound"] = {
                    "passage": 1,
                    "value": None,
                    "clause": None,
                    "coverage": None,
                    "binding": "not checked (a name or place in the other language)",
                }
                break
        found = bound_value(kind, question, passage or "")
        if found and found["binding"] == "not checked (other language)":
            text = _plain(passage or "")
            if (marks and not all(m in text for m in marks)) or (not marks and place > 1):
                continue
        if found:
            result["bound"] = {"passage": place, **found}
            break
    return result
