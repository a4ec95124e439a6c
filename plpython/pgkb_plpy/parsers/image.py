"""Images (PNG, JPEG, TIFF, GIF, BMP, WebP): a photo or scan of a page, whose only text is what
OCR reads. Each page of a multi-page TIFF is a page; any other image is one page (the first frame
of an animation).

As for a PDF's image-only pages (:mod:`.pdf`): ``ocr="defer"`` lists the pages as pending
(``ocr["pending_pages"]``, a warning ``ocr_pending`` each; the database's worker parses again with
``ocr="run"``), ``ocr="run"`` reads them with tesseract (:mod:`.ocr`) up to ``ocr_max_pages``,
``ocr="off"`` reads nothing (a warning ``ocr_off``). An image that yields no text is refused by
:func:`~pgkb_plpy.parsers.parse_bytes` (``no_text_layer``, naming why), so it stays stored and
visible as failed, never dropped."""

from __future__ import annotations

import io

from . import LIMITS, ParsedFile, ParseError, clean_title, escape_line, format_version, limit_message, sanitize_text

#: Most pixels of one page read (about 89 megapixels: an A0 sheet at 250 dpi); Pillow's own bound
#: against images that decompress to far more memory than their file's size.
MAX_PIXELS = 89_478_485


def _open(data: bytes):
    """The image, its MIME type and its pages (frames of a TIFF, else 1); ``corrupt`` when Pillow
    cannot read it, ``too_large`` past :data:`MAX_PIXELS` or ``file_max_pages``."""
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        width, height = image.size
        if width * height > MAX_PIXELS:
            raise ParseError("too_large", f"the image is {width}x{height} pixels; at most {MAX_PIXELS} pixels are read")
        image.load()  # decoded now, so that a damaged file fails here and not when OCR comes to it
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise ParseError("corrupt", f"not a readable image (damaged or truncated?): {exc}") from None
    pages = getattr(image, "n_frames", 1) if image.format == "TIFF" else 1
    if pages > LIMITS["file_max_pages"]:
        raise ParseError("too_many_pages", limit_message(f"the image has {pages} pages", "file_max_pages"))
    return image, Image.MIME.get(image.format or "", "image/png"), pages


def _warn(warnings: list[dict], pages: list[int], kind: str, what: str) -> None:
    for page in pages:
        warnings.append({"page": page, "kind": kind, "message": f"page {page} is an image{what}"})


def _read(image, allowed: list[int], warnings: list[dict], ocr_engine) -> tuple[list[dict], dict[int, list]]:
    """OCR of the pages ``allowed`` (1-based): (their records, the lines read by page)."""
    records, lines_by_page = [], {}
    languages = ocr_engine.LANGUAGES
    for page in allowed:
        image.seek(page - 1)
        frame = image.convert("RGB")
        try:
            lines, confidence, languages = ocr_engine.read_picture(frame, languages)
        except OSError as exc:
            raise ParseError("corrupt", f"page {page} of the image cannot be read (damaged?): {exc}") from None
        finally:
            frame.close()
        chars = sum(len(line.text) for line in lines)
        records.append({"page": page, "confidence": round(confidence, 1), "chars": chars})
        if not any(ch.isalnum() for line in lines for ch in line.text) or confidence < ocr_engine.MIN_CONFIDENCE:
            warnings.append(
                {
                    "page": page,
                    "kind": "ocr_unreadable",
                    "message": f"page {page}: OCR could not read it (confidence {confidence:.0f}, {chars} characters)",
                }
            )
        lines_by_page[page] = lines
    return records, lines_by_page


def _paragraphs(lines_by_page: dict[int, list], ocr_engine) -> dict[int, list[str]]:
    """Each page's paragraphs, as a scanned PDF's: the chapter and article markers repaired along
    the whole document's sequence, then each page's lines re-joined."""
    flat = [line for page in sorted(lines_by_page) for line in lines_by_page[page]]
    repaired = iter(ocr_engine.repair_divisions([line.text for line in flat]))
    return {
        page: ocr_engine.rejoin([line._replace(text=next(repaired)) for line in lines_by_page[page]])
        for page in sorted(lines_by_page)
    }


def _ocr(image, pages: int, ocr: str, warnings: list[dict]) -> tuple[dict, dict[int, list[str]]]:
    """The OCR record of the image's ``pages`` as ``ocr`` says, and the lines read by page."""
    from . import ocr as ocr_engine

    every = list(range(1, pages + 1))
    if ocr == "off":
        _warn(warnings, every, "ocr_off", "; OCR is off")
        return {"status": "off", "pending_pages": []}, {}
    try:
        name = ocr_engine.engine()
    except ocr_engine.OcrUnavailable as exc:
        _warn(warnings, every, "ocr_unavailable", f"; OCR is not available: {exc}")
        return {"status": "unavailable", "unavailable": str(exc), "pending_pages": []}, {}
    allowed, beyond = every[: LIMITS["ocr_max_pages"]], every[LIMITS["ocr_max_pages"] :]
    for page in beyond:
        warnings.append(
            {
                "page": page,
                "kind": "ocr_limit",
                "message": limit_message(f"page {page} is an image not read by OCR", "ocr_max_pages"),
            }
        )
    if ocr == "defer":
        _warn(warnings, allowed, "ocr_pending", ": OCR pending (pgkb worker)")
        return {"status": "pending", "engine": name, "pending_pages": allowed}, {}
    records, lines_by_page = _read(image, allowed, warnings, ocr_engine)
    return {"status": "done", "engine": name, "pages": records, "pending_pages": []}, _paragraphs(
        lines_by_page, ocr_engine
    )


def parse_image(data: bytes, ocr: str = "defer") -> ParsedFile:
    import PIL

    image, content_type, pages = _open(data)
    warnings: list[dict] = []
    try:
        record, lines_by_page = _ocr(image, pages, ocr, warnings)
    finally:
        image.close()
    parser = f"Pillow {PIL.__version__}"
    if not any(lines_by_page.values()):
        # awaiting OCR (defer), or nothing read: parse_bytes decides which
        return ParsedFile("image", "", None, content_type, parser, format_version("image"), None, warnings, record)
    from . import ocr as ocr_engine

    first = lines_by_page[min(lines_by_page)]
    title = clean_title(ocr_engine.title_of(first))
    pieces = [
        sanitize_text("\n".join(escape_line(line) for line in lines_by_page.get(p, []))) for p in range(1, pages + 1)
    ]
    page_starts, pos = [], 0
    for piece in pieces:
        page_starts.append(pos)
        pos += len(piece) + 2
    read = ", ".join(f"p. {p['page']} confidence {p['confidence']:.0f}" for p in record["pages"][:20])
    more = f" and {len(record['pages']) - 20} more" if len(record["pages"]) > 20 else ""
    parser += f"; OCR {record['engine']}: {read}{more}"
    return ParsedFile(
        "image",
        "\n\n".join(pieces),
        title,
        content_type,
        parser,
        format_version("image"),
        page_starts,
        warnings,
        record,
    )
