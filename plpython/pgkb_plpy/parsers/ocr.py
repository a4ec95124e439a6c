"""OCR of a PDF's image-only pages: Debian's tesseract (``tesseract-ocr``, ``tesseract-ocr-chi-sim``,
``tesseract-ocr-eng``) through ``pytesseract``; the models are Debian's files, nothing is downloaded.

:func:`read_page` renders one page at :data:`DPI` with PDFium and returns its lines and the mean
word confidence (0–100, weighted by word length). Tesseract writes Chinese with a space between
characters; the spaces between two CJK characters are removed. Runs in the parser's child process
(one core: ``OMP_THREAD_LIMIT=1``), so its memory and time limits cover it."""

from __future__ import annotations

import re

from ..vocabulary import CJK_SYMBOLS_PUNCTUATION, HALFWIDTH_FULLWIDTH_FORMS, HAN_UNIFIED

#: Languages read (tesseract's names), Chinese first: mixed pages are read as Chinese with English.
LANGUAGES = "chi_sim+eng"
#: Rendering resolution: 300 dpi is tesseract's recommendation for body text.
DPI = 300
#: A page whose mean confidence is below this, or which yields no letter, is "unreadable" (a warning).
MIN_CONFIDENCE = 40.0

#: Between two of these a space tesseract wrote is no word boundary: Han, CJK and full-width punctuation.
_CJK = CJK_SYMBOLS_PUNCTUATION + HAN_UNIFIED + HALFWIDTH_FULLWIDTH_FORMS
_CJK_GAP_RE = re.compile(f"(?<=[{_CJK}]) +(?=[{_CJK}])")


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


def read_image(image) -> tuple[list[str], float]:
    """(lines, mean confidence) of a PIL image."""
    import pytesseract

    data = pytesseract.image_to_data(image, lang=LANGUAGES, output_type=pytesseract.Output.DICT)
    lines: dict[tuple[int, int, int], list[str]] = {}
    weight = total = 0.0
    for i, word in enumerate(data["text"]):
        word = (word or "").strip()
        conf = float(data["conf"][i])
        if not word or conf < 0:
            continue
        key = (data["block_num"][i], data["par_num"][i], data["line_num"][i])
        lines.setdefault(key, []).append(word)
        weight += len(word)
        total += conf * len(word)
    text_lines = [join_cjk(" ".join(words)) for _, words in sorted(lines.items())]
    return [t for t in text_lines if t.strip()], (total / weight if weight else 0.0)


def read_page(page) -> tuple[list[str], float]:
    """(lines, mean confidence) of a pypdfium2 page, rendered at :data:`DPI`."""
    image = page.render(scale=DPI / 72, grayscale=True).to_pil()
    try:
        return read_image(image)
    finally:
        image.close()
