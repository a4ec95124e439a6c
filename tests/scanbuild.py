"""Scanned PDFs the tests build: pages of text drawn with Pillow (WenQuanYi Micro Hei, Debian's
``fonts-wqy-microhei``), slightly skewed, with a red seal stamped over the text, saved as an
image-only PDF; and what OCR of such a page is measured by (character accuracy, structure).

The Chinese text is a regulation written for these tests in the form of PRC local regulations
(红头 header, document number, title, 第X章 chapters, 第X条 articles, （一） items); official PRC
laws and regulations are not protected by copyright (PRC Copyright Law, art. 5), and this text is
the tests' own."""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
DPI = 300
A4 = (2480, 3508)  # pixels at 300 dpi
MARGIN = 260

#: (kind, text) of each page: "red" a 红头 header line (red, large), "title" centred and large,
#: "heading" centred (chapters), "para" a paragraph wrapped at the page's width, "seal" a red seal.
ZH_PAGES: list[list[tuple[str, str]]] = [
    [
        ("red", "江川市人民政府文件"),
        ("center", "江政发〔2024〕12号"),
        ("title", "江川市公共数据管理办法"),
        ("heading", "第一章　总则"),
        (
            "para",
            "第一条　为了规范公共数据的收集、共享、开放和安全管理，提高政府治理能力和公共服务水平，"
            "根据有关法律、法规，结合本市实际，制定本办法。",
        ),
        ("para", "第二条　本市行政区域内公共数据的收集、归集、共享、开放、利用及其安全管理，适用本办法。"),
        ("para", "第三条　公共数据管理遵循以下原则："),
        ("para", "（一）统筹规划、集约建设；"),
        ("para", "（二）依法收集、按需共享；"),
        ("para", "（三）分类管理、安全可控。"),
        (
            "para",
            "第四条　市人民政府负责领导全市公共数据管理工作，协调解决公共数据管理中的重大问题。"
            "区人民政府负责本行政区域内的公共数据管理工作。",
        ),
        ("heading", "第二章　数据收集"),
        (
            "para",
            "第五条　公共管理和服务机构收集公共数据，应当遵循合法、正当、必要的原则，不得超出履行职责的范围收集数据。",
        ),
        ("para", "第六条　可以通过共享方式获取的公共数据，不得重复收集；法律、法规另有规定的除外。"),
    ],
    [
        (
            "para",
            "第七条　公共管理和服务机构应当按照公共数据目录，将本单位的公共数据归集到市大数据资源平台，"
            "并保证数据的准确性、完整性和时效性。",
        ),
        ("heading", "第三章　共享与开放"),
        ("para", "第八条　公共数据以共享为原则，不共享为例外。公共数据按照共享属性分为以下类型："),
        ("para", "（一）无条件共享的公共数据；"),
        ("para", "（二）有条件共享的公共数据；"),
        ("para", "（三）不予共享的公共数据。"),
        (
            "para",
            "第九条　市大数据管理机构应当制定公共数据开放清单，并向社会公布。"
            "自然人、法人和非法人组织可以通过开放平台获取公共数据。",
        ),
        ("heading", "第四章　附则"),
        ("para", "第十条　本办法自2024年3月1日起施行。"),
        ("right", "江川市人民政府"),
        ("right", "2024年2月1日"),
        ("seal", "江川市人民政府"),
    ],
]

EN_PAGE: list[tuple[str, str]] = [
    ("title", "Records Retention Policy"),
    ("heading", "1 Purpose"),
    (
        "para",
        "This policy sets out how long the records of the department are kept, who may destroy them "
        "and how their destruction is recorded. It applies to paper and electronic records alike.",
    ),
    ("heading", "2 Retention periods"),
    (
        "para",
        "Financial records are kept for seven years after the end of the financial year they concern. "
        "Personnel files are kept for six years after the employee leaves. Contracts are kept for six years "
        "after they expire, deeds and agreements under seal for twelve years.",
    ),
    ("heading", "3 Destruction"),
    (
        "para",
        "Records are destroyed only with the written approval of the records manager. Confidential "
        "records are shredded or pulped; a certificate of destruction is kept for ten years.",
    ),
]


def _font(size: int):
    from PIL import ImageFont

    return ImageFont.truetype(str(FONT), size)


def _wrap(text: str, font, width: int) -> list[str]:
    """``text`` broken into lines no wider than ``width``: by characters for Chinese, by words otherwise."""
    words = re.findall(r"\S+\s*", text) if re.search(r"[A-Za-z]{3}", text) else list(text)
    lines, line = [], ""
    for word in words:
        if line and font.getlength((line + word).rstrip()) > width:
            lines.append(line.rstrip())
            line = word
        else:
            line += word
    return [*lines, line.rstrip()] if line.strip() else lines


def _seal(image, text: str, centre: tuple[int, int], radius: int = 300) -> None:
    """A red round seal (ring, star, the issuer's name round the top) multiplied over ``image``."""
    from PIL import Image, ImageChops, ImageDraw

    layer = Image.new("RGB", image.size, "white")
    draw = ImageDraw.Draw(layer)
    red = (220, 30, 30)
    cx, cy = centre
    draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), outline=red, width=22)
    star = [
        (
            cx + (90 if i % 2 == 0 else 36) * math.sin(i * math.pi / 5),
            cy - (90 if i % 2 == 0 else 36) * math.cos(i * math.pi / 5),
        )
        for i in range(10)
    ]
    draw.polygon(star, fill=red)
    font = _font(88)
    for i, ch in enumerate(text):
        angle = math.radians(-70 + 140 * i / max(1, len(text) - 1))
        glyph = Image.new("RGBA", (110, 110), (255, 255, 255, 0))
        ImageDraw.Draw(glyph).text((55, 55), ch, font=font, fill=red, anchor="mm")
        glyph = glyph.rotate(-math.degrees(angle), resample=Image.BICUBIC)
        x = cx + (radius - 95) * math.sin(angle)
        y = cy - (radius - 95) * math.cos(angle)
        layer.paste(glyph, (int(x - 55), int(y - 55)), glyph)
    image.paste(ImageChops.multiply(image, layer))


def render_page(items: list[tuple[str, str]], skew: float = 0.0, seal: bool = True):
    """A PIL image of one page (300 dpi A4) of ``items``, rotated by ``skew`` degrees."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", A4, "white")
    draw = ImageDraw.Draw(image)
    body, width = _font(50), A4[0] - 2 * MARGIN
    y = MARGIN
    seal_at = None
    for kind, text in items:
        if kind == "seal":
            seal_at = (A4[0] - MARGIN - 330, y - 170)
            continue
        font = {"red": _font(110), "title": _font(76), "heading": _font(60)}.get(kind, body)
        fill = (210, 20, 20) if kind == "red" else (20, 20, 20)
        if kind == "para":
            for line in _wrap(text, font, width):
                draw.text((MARGIN, y), line, font=font, fill=fill)
                y += int(font.size * 1.7)
        else:
            length = font.getlength(text)
            x = A4[0] - MARGIN - length if kind == "right" else (A4[0] - length) / 2
            draw.text((x, y), text, font=font, fill=fill)
            y += int(font.size * (2.0 if kind in ("red", "title") else 1.9))
            if kind == "red":  # the red rule under a 红头 header
                draw.line((MARGIN, y - 30, A4[0] - MARGIN, y - 30), fill=fill, width=8)
    if seal and seal_at:
        _seal(image, next(t for k, t in items if k == "seal"), seal_at)
    if skew:
        image = image.rotate(skew, resample=Image.BICUBIC, expand=False, fillcolor="white")
    return image


def scan_pdf(images) -> bytes:
    """An image-only PDF of ``images`` (one page each, at :data:`DPI`)."""
    out = io.BytesIO()
    first, *rest = [im.convert("RGB") for im in images]
    first.save(out, "PDF", resolution=DPI, save_all=True, append_images=rest)
    return out.getvalue()


def page_text(items: list[tuple[str, str]]) -> str:
    """The text a page holds, one line per item (the seal's ring text excluded)."""
    return "\n".join(text for kind, text in items if kind != "seal")


# ------------------------------------------------------------------------------ measures


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions) of ``a`` and ``b``."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def _comparable(text: str, han: bool) -> str:
    text = re.sub(r"^#+ ", "", text, flags=re.MULTILINE).replace("\\", "")
    return re.sub(r"\s+", "", text) if han else " ".join(text.split())


def char_accuracy(read: str, truth: str, han: bool = True) -> float:
    """1 - edit distance / length of ``truth``: whitespace ignored for Chinese (collapsed otherwise),
    heading marks and escapes ignored."""
    read, truth = _comparable(read, han), _comparable(truth, han)
    return max(0.0, 1 - edit_distance(read, truth) / max(1, len(truth)))


def structure(text: str) -> list[str]:
    """The chapters, articles and items that start a line of ``text`` (``章1``, ``条3``, ``zh_paren2``),
    in order, as the chunker sees them."""
    from pgkb_plpy.chunker import _marker

    found = []
    for line in text.split("\n"):
        marker = _marker(re.sub(r"^#+ ", "", line))
        if marker is not None and marker.kind in ("章", "条", "zh_paren"):
            found.append(f"{marker.kind}{marker.number[0]}")
    return found


def structure_right(read: str, truth: str) -> tuple[int, int, int]:
    """(markers of ``truth`` found in ``read`` in order, markers in ``truth``, markers of ``read`` that
    ``truth`` has not: false sections)."""
    a, b = structure(read), structure(truth)
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a)):
        for j in range(len(b)):
            table[i + 1][j + 1] = table[i][j] + 1 if a[i] == b[j] else max(table[i][j + 1], table[i + 1][j])
    common = table[-1][-1]
    return common, len(b), len(a) - common


def sample_scan() -> tuple[bytes, list[tuple[str, str, bool]]]:
    """The measured scan: (PDF, [(page name, its text, Chinese?)]): the regulation's two pages (the
    second skewed the other way and sealed) and an English page as the control."""
    pages = [
        ("zh, skewed 0.5°", ZH_PAGES[0], 0.5, True),
        ("zh, skewed -0.7°, red seal", ZH_PAGES[1], -0.7, True),
        ("en, skewed 0.4°", EN_PAGE, 0.4, False),
    ]
    pdf = scan_pdf([render_page(items, skew) for _, items, skew, _ in pages])
    return pdf, [(name, page_text(items), han) for name, items, _, han in pages]


def measure(parsed, truths: list[tuple[str, str, bool]]) -> list[dict]:
    """Per page of a parsed scan: character accuracy and structure (markers right, of, false)."""
    starts = [*parsed.page_starts, len(parsed.text) + 2]
    rows = []
    for n, (name, truth, han) in enumerate(truths):
        read = parsed.text[starts[n] : starts[n + 1] - 2]
        right, total, false = structure_right(read, truth)
        rows.append(
            {
                "page": n + 1,
                "name": name,
                "accuracy": char_accuracy(read, truth, han),
                "structure": (right, total, false),
            }
        )
    return rows


def compare_languages() -> None:
    """Each page of the sample read with Chinese and English and with Chinese alone (server venv):
    character accuracy and CPU seconds of tesseract."""
    import os

    import pypdfium2 as pdfium
    from pgkb_plpy.parsers import ocr

    pdf, truths = sample_scan()
    doc = pdfium.PdfDocument(pdf)
    for n, (name, truth, han) in enumerate(truths):
        image = ocr.prepare(doc[n].render(scale=DPI / 72).to_pil())
        for languages in (ocr.LANGUAGES, ocr.CHINESE):
            before = os.times()
            lines, _ = ocr.read_image(image, languages)
            after = os.times()
            cpu = after.children_user + after.children_system - before.children_user - before.children_system
            accuracy = char_accuracy("\n".join(ocr.rejoin(lines)), truth, han)
            print(f"p. {n + 1} {name}: {languages}: characters {accuracy:.1%}, {cpu:.2f} s CPU")


def main() -> None:
    import os
    import sys

    from pgkb_plpy import parsers

    if "--languages" in sys.argv:
        compare_languages()
        return
    # --plpython DIR: the pgkb_plpy the child imports (another checkout's, to compare)
    package = (
        sys.argv[sys.argv.index("--plpython") + 1]
        if "--plpython" in sys.argv
        else str(Path(__file__).parents[1] / "plpython")
    )
    pdf, truths = sample_scan()
    started = os.times()
    parsed = parsers.parse_isolated(
        pdf,
        "scan.pdf",
        python="/opt/pgkb/server-venv/bin/python3",
        package_path=package,
        ocr="run",
        timeout_s=600,
    )
    child = os.times()
    cpu = (child.children_user + child.children_system) - (started.children_user + started.children_system)
    for row in measure(parsed, truths):
        right, total, false = row["structure"]
        print(
            f"p. {row['page']} {row['name']}: characters {row['accuracy']:.1%}, "
            f"structure {right}/{total} right, {false} false"
        )
    print(f"title: {parsed.title!r}; {len(truths) / cpu:.2f} pages per CPU-second ({cpu:.1f} s CPU)")
    if "-v" in sys.argv:
        print(parsed.text)
        print(parsed.warnings)


if __name__ == "__main__":
    main()
