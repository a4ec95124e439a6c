"""OCR of a PDF's image-only pages: Debian's tesseract (``tesseract-ocr``, ``tesseract-ocr-chi-sim``,
``tesseract-ocr-eng``) through ``pytesseract``; the models are Debian's files, nothing is downloaded.

:func:`read_page` renders one page at :data:`DPI` with PDFium (:func:`read_picture` reads an image),
takes a red seal out (:func:`prepare`) and returns its lines and the mean word confidence (0–100,
weighted by word length); a page read as mostly Han is read with Chinese alone. Each line is
normalised as Chinese is printed (:func:`normalise`: tesseract's spaces between characters,
half-width brackets and punctuation, ``(=)`` for （二）); the chapter and article markers of the
document's lines are checked against their sequence (:func:`repair_divisions`), then each page's
lines are joined into paragraphs (:func:`rejoin`) and the document titled (:func:`title_of`). Runs
in the parser's child process (one core: ``OMP_THREAD_LIMIT=1``), so its memory and time limits
cover it."""

from __future__ import annotations

import re
from typing import NamedTuple

from ..vocabulary import CJK_SYMBOLS_PUNCTUATION, HALFWIDTH_FULLWIDTH_FORMS, HAN_UNIFIED

#: Languages read (tesseract's names), Chinese first: mixed pages are read as Chinese with English.
LANGUAGES = "chi_sim+eng"
#: Languages of a page read as mostly Han: Chinese alone reads Chinese better than with English.
CHINESE = "chi_sim"
#: Share of Han characters among a page's letters from which it is read with :data:`CHINESE`.
HAN_PAGE_SHARE = 0.5
#: How much redder than green and blue (0-255) a pixel of a seal is.
RED_MARGIN = 80
#: A title is one of the first lines of the first OCR'd page, of at most this many characters.
TITLE_LINES = 6
TITLE_MAX_CHARS = 40
#: How near the right edge of the text (share of its width) a line that goes on in the next one
#: ends: Chinese fills its lines, other scripts are set ragged.
REJOIN_CJK = 0.04
REJOIN_OTHER = 0.15
#: Rendering resolution: 300 dpi is tesseract's recommendation for body text.
DPI = 300
#: A page whose mean confidence is below this, or which yields no letter, is "unreadable" (a warning).
MIN_CONFIDENCE = 40.0

#: Between two of these a space tesseract wrote is no word boundary: Han, CJK and full-width punctuation.
_CJK = CJK_SYMBOLS_PUNCTUATION + HAN_UNIFIED + HALFWIDTH_FULLWIDTH_FORMS
_CJK_GAP_RE = re.compile(f"(?<=[{_CJK}]) +(?=[{_CJK}])")
_HAN_RE = re.compile(f"[{HAN_UNIFIED}]")
_CJK_CHAR_RE = re.compile(f"[{_CJK}]")


class OcrUnavailable(Exception):
    """tesseract, pytesseract or a language's model is missing here."""


def engine() -> str:
    """``tesseract 5.3.0 (chi_sim+eng)``; raises :class:`OcrUnavailable` when it cannot run."""
    try:
        import pytesseract

        version = pytesseract.get_tesseract_version()
        languages = set(pytesseract.get_languages(config=""))
    except Exception as exc:  # noqa: BLE001 - ImportError, TesseractNotFoundError, OSError: all "not here"
        raise OcrUnavailable(f"{type(exc).__name__}: {exc}".strip()) from None
    missing = [lang for lang in LANGUAGES.split("+") if lang not in languages]
    if missing:
        raise OcrUnavailable(f"tesseract has no model for {', '.join(missing)} (apt tesseract-ocr-chi-sim)")
    return f"tesseract {version} ({LANGUAGES})"


def join_cjk(text: str) -> str:
    """``text`` without the spaces tesseract puts between two CJK characters."""
    return _CJK_GAP_RE.sub("", text)


def _is_han(ch: str) -> bool:
    return bool(_HAN_RE.match(ch))


def _is_cjk(ch: str) -> bool:
    return bool(ch) and bool(_CJK_CHAR_RE.match(ch))


def han_share(lines: list[str]) -> float:
    """Share of Han characters among the letters of ``lines`` (0 when there is no letter)."""
    letters = [ch for line in lines for ch in line if ch.isalpha()]
    return sum(1 for ch in letters if _is_han(ch)) / len(letters) if letters else 0.0


def prepare(image):
    """``image`` as grey, with a red seal taken out: strongly red pixels below the top quarter of the
    page turn white (a seal stamped over the text blurs its characters; a 红头 header, red at the
    top, is text and stays)."""
    from PIL import ImageChops

    rgb = image.convert("RGB")
    red, green, blue = rgb.split()
    grey = rgb.convert("L")
    mask = ImageChops.subtract(red, ImageChops.lighter(green, blue)).point(lambda v: 255 if v > RED_MARGIN else 0)
    if mask.getbbox() is not None:
        mask.paste(0, (0, 0, mask.width, mask.height // 4))
        grey.paste(255, mask=mask)
    return grey


class Line(NamedTuple):
    text: str
    left: int
    right: int


def read_image(image, languages: str = LANGUAGES) -> tuple[list[Line], float]:
    """(lines with their left and right edges, mean confidence) of a PIL image, each line
    normalised (:func:`normalise`)."""
    import pytesseract

    data = pytesseract.image_to_data(image, lang=languages, output_type=pytesseract.Output.DICT)
    lines: dict[tuple[int, int, int], list[int]] = {}
    weight = total = 0.0
    for i, word in enumerate(data["text"]):
        word = (word or "").strip()
        conf = float(data["conf"][i])
        if not word or conf < 0:
            continue
        key = (data["block_num"][i], data["par_num"][i], data["line_num"][i])
        lines.setdefault(key, []).append(i)
        weight += len(word)
        total += conf * len(word)
    out = []
    for _, words in sorted(lines.items()):
        text = normalise(" ".join(data["text"][i].strip() for i in words))
        if text.strip():
            left = min(data["left"][i] for i in words)
            out.append(Line(text, left, max(data["left"][i] + data["width"][i] for i in words)))
    return out, (total / weight if weight else 0.0)


def read_picture(picture, languages: str = LANGUAGES) -> tuple[list[Line], float, str]:
    """(lines, mean confidence, languages read with) of a PIL image of a page (a seal taken out,
    :func:`prepare`). A page read as mostly Han (:data:`HAN_PAGE_SHARE`) with Chinese and English is
    read again with Chinese alone, which reads Chinese better (docs/INGEST.md); ``languages`` is the
    first try (the last page's choice: a document keeps to one script)."""
    image = prepare(picture)
    try:
        lines, confidence = read_image(image, languages)
        mostly_han = han_share([line.text for line in lines]) >= HAN_PAGE_SHARE
        other = CHINESE if mostly_han else LANGUAGES
        if other != languages:
            lines, confidence = read_image(image, other)
            languages = other
        return lines, confidence, languages
    finally:
        image.close()


def read_page(page, languages: str = LANGUAGES) -> tuple[list[Line], float, str]:
    """:func:`read_picture` of a pypdfium2 page rendered at :data:`DPI`."""
    picture = page.render(scale=DPI / 72).to_pil()
    try:
        return read_picture(picture, languages)
    finally:
        picture.close()


# ------------------------------------------------------------------------------ Chinese structure

_ZH_DIGITS = "零一二三四五六七八九"
#: What a gap after 第X条 (a full-width space) is read as: quotes, brackets, bars.
_GAP_CHARS = "“”\"'‘’「」『』|丨　 "
#: 第X章 / 第X条 with a gap after it; the number may be misread (the sequence repairs it).
_DIVISION_RE = re.compile(rf"^第(\S{{1,4}}?) ?([编章节条])[{_GAP_CHARS}]+(?=\S)")
#: A misread division marker: a short token with no Han (SAR, SOS, 5$) before a gap and Han text.
_GARBLED_RE = re.compile(rf"^([^\s{_CJK}]{{1,4}})[{_GAP_CHARS}]+(?=[{HAN_UNIFIED}])")
_ITEM_RE = re.compile(r"^[(（《〈<]\s*([一二三四五六七八九十=\-—]{1,3})\s*[)）》〉>]\s*")
_DOC_NUMBER_RE = re.compile(rf"(?<=[{HAN_UNIFIED}]) ?[\[【(（〔] ?(\d{{4}}) ?[\]】)）〕] ?(?=\d)")
_HAN_DIGIT_GAP_RE = re.compile(rf"(?<=[{HAN_UNIFIED}]) +(?=\d)|(?<=\d) +(?=[{HAN_UNIFIED}])")
_HALF_PUNCT = {",": "，", ";": "；", ":": "：", "?": "？", "!": "！", ".": "。"}
_HALF_PUNCT_RE = re.compile(rf"(?<=[{HAN_UNIFIED}]) ?([,;:?!.])(?= ?[{HAN_UNIFIED}]| *$)")
_ITEM_MISREADS = {"=": "二", "-": "一", "—": "一"}


def zh_numeral(n: int) -> str:
    """1 一, 10 十, 12 十二, 20 二十, 105 一百零五: the numerals of 第X条."""
    if n < 10:
        return _ZH_DIGITS[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return ("" if tens == 1 else _ZH_DIGITS[tens]) + "十" + (_ZH_DIGITS[ones] if ones else "")
    hundreds, rest = divmod(n, 100)
    tail = (
        "" if rest == 0 else ("零" + _ZH_DIGITS[rest] if rest < 10 else ("一" if rest < 20 else "") + zh_numeral(rest))
    )
    return zh_numeral(hundreds) + "百" + tail


def normalise(text: str) -> str:
    """An OCR line as Chinese is printed: no spaces between Han characters or between Han and digits,
    half-width punctuation next to Han full-width, an item's brackets full-width (``(=)`` and ``《二 )``
    are （二）), a document number's brackets 〔2024〕, the gap after 第X条 a full-width space."""
    text = _HAN_DIGIT_GAP_RE.sub("", join_cjk(text))
    text = _HALF_PUNCT_RE.sub(lambda m: _HALF_PUNCT[m.group(1)], text)
    text = _DOC_NUMBER_RE.sub(lambda m: f"〔{m.group(1)}〕", text)
    m = _ITEM_RE.match(text)
    if m:
        number = "".join(_ITEM_MISREADS.get(ch, ch) for ch in m.group(1))
        text = f"（{number}）" + text[m.end() :]
    m = _DIVISION_RE.match(text)
    if m:
        text = f"第{m.group(1)}{m.group(2)}\u3000" + text[m.end() :]
    return join_cjk(text)


def _division(text: str) -> tuple[str, int | None] | None:
    """(kind, number or None when misread) of a line that starts with 第X章/条 and a gap."""
    from ..chunker import _zh_number

    m = _DIVISION_RE.match(text)
    if not m:
        return None
    number = m.group(1)
    if re.fullmatch(r"\d{1,3}|[零〇一二两三四五六七八九十百]{1,4}", number):
        return m.group(2), _zh_number(number)
    return m.group(2), None


def repair_divisions(lines: list[str]) -> list[str]:
    """``lines`` (a document's OCR lines, in order) with misread chapter and article markers put
    right where their neighbours fix them: a 第X条 whose number is unreadable or breaks the sequence
    between 第n条 and 第n+2条 is 第n+1条; a line that starts with a short garbled token (SAR, SOS) is
    第n+1条 between those, or 第n+1章 when its rest is a short title after 第n章 (and before 第n+2章
    or no chapter). A marker the neighbours do not fix stays as read."""
    out = list(lines)
    found = [_division(t) for t in out]
    for kind in ("条", "章"):
        numbered = [(i, d[1]) for i, d in enumerate(found) if d and d[0] == kind and d[1] is not None]
        for i, text in enumerate(out):
            d = found[i]
            before = [n for j, n in numbered if j < i]
            after = [n for j, n in numbered if j > i]
            if not before:
                continue
            want = before[-1] + 1
            fits = after[0] == want + 1 if after else kind == "章"
            if d and d[0] == kind and d[1] != want and fits:
                m = _DIVISION_RE.match(text)
                out[i] = f"第{zh_numeral(want)}{kind}\u3000" + text[m.end() :]
            elif d is None and fits and (g := _GARBLED_RE.match(text)):
                rest = text[g.end() :]
                if kind == "章" and (len(rest) > 12 or re.search("[。；，]", rest)):
                    continue
                out[i] = f"第{zh_numeral(want)}{kind}\u3000" + rest
            else:
                continue
            found[i] = (kind, want)
            numbered = sorted([*numbered, (i, want)])
    return out


def rejoin(lines: list[Line]) -> list[str]:
    """A page's lines with the lines of each paragraph joined: a line that reaches the right edge of
    the text (Chinese: within 4 % of the text's width; other scripts, set ragged: within 15 %) goes on
    in the next line that starts at the left edge, unless that one starts with numbering (第X条 with
    its gap, （一）, 1.2; a reference such as 第五条的规定 goes on). Chinese joins without a space,
    other scripts with one."""
    from ..chunker import _marker

    if not lines:
        return []
    right = max(line.right for line in lines)
    left = min(line.left for line in lines)
    out: list[str] = [lines[0].text]
    previous = lines[0]
    for line in lines[1:]:
        han = _is_han(previous.text[-1:] or " ") or _is_cjk(previous.text[-1:])
        tolerance = (right - left) * (REJOIN_CJK if han else REJOIN_OTHER)
        full = previous.right >= right - tolerance and line.left <= left + (right - left) * REJOIN_CJK
        marker = _marker(line.text)
        numbered = marker is not None and not (marker.kind in "编章节条款" and not _DIVISION_RE.match(line.text))
        if full and not numbered:
            glue = "" if _is_cjk(out[-1][-1:]) or _is_cjk(line.text[:1]) else " "
            out[-1] += glue + line.text
        else:
            out.append(line.text)
        previous = line
    return out


_HEADER_RE = re.compile(r"(文件|公报|简报|通报)$|〔\d{4}〕|\d+号$|^\d{4}年\d{1,2}月\d{1,2}日$")


def title_of(lines: list[str]) -> str | None:
    """The title of an OCR'd document: the first of its first lines that reads as a heading (short,
    no sentence punctuation, not a numbered line); a 红头 header (…文件), a document number
    (〔2024〕12号) or a date is passed over."""
    from ..chunker import _marker

    for text in lines[:TITLE_LINES]:
        text = text.strip()
        if (
            2 <= len(text) <= TITLE_MAX_CHARS
            and not re.search(r"[。，；：.,;:!?！？]$", text)
            and _marker(text) is None
            and not _HEADER_RE.search(text)
            and sum(ch.isalpha() for ch in text) >= 2
        ):
            return text
    return None
