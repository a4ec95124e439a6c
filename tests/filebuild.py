"""Files the tests build: PDFs drawn with PDFium (pypdfium2 of the server venv, in a child process)
and DOCX packages written from their XML."""

from __future__ import annotations

import io
import json
import re
import subprocess
import zipfile
from pathlib import Path

SERVER_PYTHON = Path("/opt/pgkb/server-venv/bin/python3")

_DRAW_SOURCE = r"""
def draw(pages):
    import ctypes, io
    import pypdfium2 as pdfium, pypdfium2.raw as raw
    pdf = pdfium.PdfDocument.new()
    for lines in pages:
        page = pdf.new_page(595, 842)
        for text, size, y, *x in lines:
            obj = raw.FPDFPageObj_NewTextObj(pdf.raw, b"Helvetica", size)
            buf = ctypes.create_string_buffer((text + "\x00").encode("utf-16-le"))
            raw.FPDFText_SetText(obj, ctypes.cast(buf, ctypes.POINTER(raw.FPDF_WCHAR)))
            raw.FPDFPageObj_Transform(obj, 1, 0, 0, 1, x[0] if x else 50, y)
            raw.FPDFPage_InsertObject(page.raw, obj)
        raw.FPDFPage_GenerateContent(page.raw)
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()
"""
_DRAW_MAIN = "import json, sys\nsys.stdout.buffer.write(draw(json.load(sys.stdin)['pages']))\n"


def draw_pdf(pages: list[list[tuple]]) -> bytes:
    """A PDF whose page n holds the lines (text, font size, y from the bottom[, x]) of ``pages[n]``."""
    done = subprocess.run(
        [str(SERVER_PYTHON), "-c", _DRAW_SOURCE + _DRAW_MAIN],
        input=json.dumps({"pages": pages}).encode(),
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


_W_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
_MC_NS = 'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006"'
_R_NS = 'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
_STYLES = f"""<w:styles {_W_NS} {_R_NS}>
<w:style w:type="paragraph" w:default="1" w:styleId="Normal"><w:name w:val="Normal"/></w:style>
<w:style w:type="paragraph" w:styleId="Heading1"><w:name w:val="heading 1"/><w:basedOn w:val="Normal"/></w:style>
<w:style w:type="paragraph" w:styleId="Heading2"><w:name w:val="heading 2"/><w:basedOn w:val="Heading1"/></w:style>
<w:style w:type="paragraph" w:styleId="ListParagraph"><w:name w:val="List Paragraph"/>
<w:basedOn w:val="Normal"/></w:style>
</w:styles>"""


_OFFICE = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_WML = "application/vnd.openxmlformats-officedocument.wordprocessingml"


def make_docx(body: str, footnotes: str = "", endnotes: str = "", numbering: str = "") -> bytes:
    """A DOCX package (content types and relationships as Word writes them) whose document body is
    ``body`` (WordprocessingML), with styles, notes and list definitions (``numbering``: the
    ``w:abstractNum`` and ``w:num`` elements of numbering.xml)."""
    parts = {"styles": ("styles", f"{_WML}.styles+xml", _STYLES)}
    if numbering:
        parts["numbering"] = ("numbering", f"{_WML}.numbering+xml", f"<w:numbering {_W_NS}>{numbering}</w:numbering>")
    for name, notes, kind in (("footnotes", footnotes, "footnote"), ("endnotes", endnotes, "endnote")):
        if notes:
            xml = (
                f'<w:{name} {_W_NS} {_R_NS}><w:{kind} w:type="separator" w:id="-1"><w:p><w:r><w:t>____</w:t></w:r>'
                f"</w:p></w:{kind}>{notes}</w:{name}>"
            )
            parts[name] = (name, f"{_WML}.{name}+xml", xml)
    overrides = "".join(
        f'<Override PartName="/word/{name}.xml" ContentType="{ctype}"/>' for name, ctype, _ in parts.values()
    )
    rels = "".join(
        f'<Relationship Id="r{i}" Type="{_OFFICE}/{name}" Target="{name}.xml"/>'
        for i, (name, _, _) in enumerate(parts.values(), 1)
    )
    pkg = '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(
            "[Content_Types].xml",
            '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            f'<Override PartName="/word/document.xml" ContentType="{_WML}.document.main+xml"/>{overrides}</Types>',
        )
        z.writestr(
            "_rels/.rels",
            pkg + f'<Relationship Id="r1" Type="{_OFFICE}/officeDocument" Target="word/document.xml"/></Relationships>',
        )
        z.writestr("word/_rels/document.xml.rels", pkg + rels + "</Relationships>")
        z.writestr("word/document.xml", f"<w:document {_W_NS} {_MC_NS} {_R_NS}><w:body>{body}</w:body></w:document>")
        for name, _, xml in parts.values():
            z.writestr(f"word/{name}.xml", xml)
    return out.getvalue()


def para(text: str, style: str = "") -> str:
    pr = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f'<w:p>{pr}<w:r><w:t xml:space="preserve">{text}</w:t></w:r></w:p>'


def numbered_list(num_id: int, fmt: str, text: str) -> str:
    """numbering.xml's definition of list ``num_id``: one level, numbers in format ``fmt``
    (``decimal``, ``chineseCounting``, ``bullet`` ...) written as ``text`` (``%1.``, ``%1、``)."""
    return (
        f'<w:abstractNum w:abstractNumId="{num_id}"><w:lvl w:ilvl="0"><w:start w:val="1"/>'
        f'<w:numFmt w:val="{fmt}"/><w:lvlText w:val="{text}"/></w:lvl></w:abstractNum>'
        f'<w:num w:numId="{num_id}"><w:abstractNumId w:val="{num_id}"/></w:num>'
    )


def list_para(text: str, num_id: int, style: str = "ListParagraph", ilvl: int = 0) -> str:
    """A paragraph numbered by Word's list ``num_id`` (``w:numPr``)."""
    return (
        f'<w:p><w:pPr><w:pStyle w:val="{style}"/><w:numPr><w:ilvl w:val="{ilvl}"/><w:numId w:val="{num_id}"/>'
        f'</w:numPr></w:pPr><w:r><w:t xml:space="preserve">{text}</w:t></w:r></w:p>'
    )


def write_pdf(pages: list[list[tuple]]) -> bytes:
    """A PDF written here, without PDFium, whose text is any Unicode (Chinese too): page n holds the
    lines (text, font size, y from the bottom[, x]) of ``pages[n]``, set in a CID font whose glyph
    ids are the code points (not embedded: PDFium substitutes a font to draw it; the text layer
    comes from its ToUnicode map)."""
    cmap = (
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /pgkb-identity def "
        "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def "
        "1 begincodespacerange <0000> <FFFF> endcodespacerange "
        "1 beginbfrange <0000> <FFFF> <0000> endbfrange endcmap "
        "CMapName currentdict /CMap defineresource pop end end"
    )
    objects: dict[int, bytes] = {
        1: b"<</Type/Catalog/Pages 2 0 R>>",
        3: b"<</Type/Font/Subtype/Type0/BaseFont/SimSun/Encoding/Identity-H/DescendantFonts[4 0 R]/ToUnicode 5 0 R>>",
        4: b"<</Type/Font/Subtype/CIDFontType2/BaseFont/SimSun/CIDToGIDMap/Identity/DW 1000"
        b"/CIDSystemInfo<</Registry(Adobe)/Ordering(Identity)/Supplement 0>>/FontDescriptor 6 0 R>>",
        5: f"<</Length {len(cmap)}>>stream\n{cmap}\nendstream".encode(),
        6: b"<</Type/FontDescriptor/FontName/SimSun/Flags 4/FontBBox[0 -140 1000 880]/ItalicAngle 0"
        b"/Ascent 880/Descent -120/CapHeight 700/StemV 80>>",
    }
    kids = []
    for lines in pages:
        ops = []
        for text, size, y, *x in lines:
            glyphs = "".join(f"{ord(ch):04X}" for ch in text if ord(ch) < 0x10000)
            ops.append(f"BT /F1 {size} Tf 1 0 0 1 {x[0] if x else 50} {y} Tm <{glyphs}> Tj ET")
        stream = "\n".join(ops)
        number = max(objects) + 1
        objects[number] = f"<</Length {len(stream)}>>stream\n{stream}\nendstream".encode()
        objects[number + 1] = (
            f"<</Type/Page/Parent 2 0 R/MediaBox[0 0 595 842]/Contents {number} 0 R"
            "/Resources<</Font<</F1 3 0 R>>>>>>".encode()
        )
        kids.append(number + 1)
    objects[2] = f"<</Type/Pages/Count {len(kids)}/Kids[{' '.join(f'{k} 0 R' for k in kids)}]>>".encode()
    out = b"%PDF-1.7\n"
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += f"{number} 0 obj\n".encode() + objects[number] + b"\nendobj\n"
    xref = len(out)
    size = max(objects) + 1
    out += f"xref\n0 {size}\n0000000000 65535 f\r\n".encode()
    out += b"".join(f"{offsets[n]:010d} 00000 n\r\n".encode() for n in range(1, size))
    out += f"trailer\n<</Size {size}/Root 1 0 R>>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


def _pdf_string(text: str) -> str:
    return "<FEFF" + text.encode("utf-16-be").hex().upper() + ">"


def add_outline(pdf: bytes, entries: list[tuple[str, int, int]]) -> bytes:
    """``pdf`` (as :func:`draw_pdf` writes it) with an outline (bookmarks) appended as an incremental
    update: ``entries`` are (title, level from 1, page index) in document order."""
    text = pdf.decode("latin-1")

    def obj(number: int) -> str:
        return re.search(rf"(?<!\d){number} 0 obj(.*?)endobj", text, re.S).group(1)

    root = int(re.findall(r"/Root (\d+) 0 R", text)[-1])
    pages = int(re.search(r"/Pages (\d+) 0 R", obj(root)).group(1))
    kids = [int(k) for k in re.findall(r"(\d+) 0 R", re.search(r"/Kids\[(.*?)\]", obj(pages)).group(1))]
    size = int(re.findall(r"/Size (\d+)", text)[-1])
    startxref = int(re.findall(r"startxref\s+(\d+)", text)[-1])
    info = re.findall(r"/Info (\d+) 0 R", text)
    outlines = size
    items = [outlines + 1 + i for i in range(len(entries))]
    # each entry's parent: the nearest earlier entry of a lower level, else the outline's root
    parents, stack = [], []
    for i, (_, level, _) in enumerate(entries):
        while stack and entries[stack[-1]][1] >= level:
            stack.pop()
        parents.append(items[stack[-1]] if stack else outlines)
        stack.append(i)
    children: dict[int, list[int]] = {}
    for i, parent in enumerate(parents):
        children.setdefault(parent, []).append(items[i])
    bodies = {root: f"<</Type/Catalog/Pages {pages} 0 R/Outlines {outlines} 0 R/PageMode/UseOutlines>>"}

    def links(number: int) -> str:
        kin = children.get(number, [])
        return f"/First {kin[0]} 0 R/Last {kin[-1]} 0 R/Count {len(kin)}" if kin else ""

    bodies[outlines] = f"<</Type/Outlines{links(outlines)}>>"
    for i, (title, _, page) in enumerate(entries):
        number, siblings = items[i], children[parents[i]]
        k = siblings.index(number)
        near = (f"/Prev {siblings[k - 1]} 0 R" if k else "") + (
            f"/Next {siblings[k + 1]} 0 R" if k + 1 < len(siblings) else ""
        )
        bodies[number] = (
            f"<</Title {_pdf_string(title)}/Parent {parents[i]} 0 R{near}{links(number)}"
            f"/Dest[{kids[page]} 0 R/XYZ null null null]>>"
        )
    out = pdf + b"\r\n"
    offsets = {}
    for number in sorted(bodies):
        offsets[number] = len(out)
        out += f"{number} 0 obj\r\n{bodies[number]}\r\nendobj\r\n".encode("latin-1")
    xref = len(out)
    lines = ["xref", "0 1", "0000000000 65535 f\r"]
    for number in sorted(bodies):
        lines += [f"{number} 1", f"{offsets[number]:010d} 00000 n\r"]
    trailer = f"/Size {items[-1] + 1 if items else size}/Root {root} 0 R/Prev {startxref}"
    trailer += f"/Info {info[-1]} 0 R" if info else ""
    lines += ["trailer", f"<<{trailer}>>", "startxref", str(xref), "%%EOF", ""]
    return out + "\n".join(lines).encode("latin-1")


def draw_pdf_here(pages: list[list[tuple]]) -> bytes:
    """:func:`draw_pdf` in this process (a Python that has pypdfium2)."""
    namespace: dict = {}
    exec(_DRAW_SOURCE, namespace)
    return namespace["draw"](pages)


# ----------------------------------------------------------------------------- XLSX, PPTX

_CT = (
    '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
)
_PKG_RELS = "http://schemas.openxmlformats.org/package/2006/relationships"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_S = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"


def _package(parts: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, xml in parts.items():
            z.writestr(name, xml)
    return out.getvalue()


def _rels(targets: list[tuple[str, str, str]]) -> str:
    body = "".join(f'<Relationship Id="{i}" Type="{_REL}/{t}" Target="{target}"/>' for i, t, target in targets)
    return f'<Relationships xmlns="{_PKG_RELS}">{body}</Relationships>'


def make_xlsx(sheets: list[tuple[str, list[list]]], title: str = "") -> bytes:
    """A workbook of ``(sheet name, rows)``; a cell is a str (inline string), a number or None."""
    parts = {
        "[Content_Types].xml": _CT + "</Types>",
        "xl/workbook.xml": f'<workbook xmlns="{_S}" xmlns:r="{_REL}"><sheets>'
        + "".join(f'<sheet name="{name}" sheetId="{i + 1}" r:id="rId{i + 1}"/>' for i, (name, _) in enumerate(sheets))
        + "</sheets></workbook>",
        "xl/_rels/workbook.xml.rels": _rels(
            [(f"rId{i + 1}", "worksheet", f"worksheets/sheet{i + 1}.xml") for i in range(len(sheets))]
        ),
    }
    if title:
        parts["docProps/core.xml"] = (
            '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties" '
            f'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{title}</dc:title></cp:coreProperties>'
        )
    for i, (_, rows) in enumerate(sheets):
        xml_rows = []
        for r, row in enumerate(rows, start=1):
            cells = []
            for c, value in enumerate(row):
                ref = f"{chr(65 + c)}{r}"
                if value is None:
                    continue
                if isinstance(value, str):
                    cells.append(f'<c r="{ref}" t="inlineStr"><is><t>{value}</t></is></c>')
                else:
                    cells.append(f'<c r="{ref}"><v>{value}</v></c>')
            xml_rows.append(f'<row r="{r}">{"".join(cells)}</row>')
        parts[f"xl/worksheets/sheet{i + 1}.xml"] = (
            f'<worksheet xmlns="{_S}"><sheetData>{"".join(xml_rows)}</sheetData></worksheet>'
        )
    return _package(parts)


_P = "http://schemas.openxmlformats.org/presentationml/2006/main"
_A = "http://schemas.openxmlformats.org/drawingml/2006/main"


def _sp(text_paragraphs: list[str], placeholder: str | None) -> str:
    ph = f'<p:ph type="{placeholder}"/>' if placeholder else ""
    paras = "".join(f"<a:p><a:r><a:t>{t}</a:t></a:r></a:p>" for t in text_paragraphs)
    return (
        f'<p:sp><p:nvSpPr><p:cNvPr id="1" name="s"/><p:cNvSpPr/><p:nvPr>{ph}</p:nvPr></p:nvSpPr>'
        f"<p:txBody><a:bodyPr/>{paras}</p:txBody></p:sp>"
    )


def make_pptx(slides: list[tuple[str, list[str], str]]) -> bytes:
    """A presentation of ``(title, body paragraphs, speaker notes)`` slides."""
    ns = f'xmlns:p="{_P}" xmlns:a="{_A}" xmlns:r="{_REL}"'
    parts = {
        "[Content_Types].xml": _CT + "</Types>",
        "ppt/presentation.xml": f"<p:presentation {ns}><p:sldIdLst>"
        + "".join(f'<p:sldId id="{256 + i}" r:id="rId{i + 1}"/>' for i in range(len(slides)))
        + "</p:sldIdLst></p:presentation>",
        "ppt/_rels/presentation.xml.rels": _rels(
            [(f"rId{i + 1}", "slide", f"slides/slide{i + 1}.xml") for i in range(len(slides))]
        ),
    }
    for i, (title, body, notes) in enumerate(slides, start=1):
        shapes = _sp([title], "title") + _sp(body, None)
        parts[f"ppt/slides/slide{i}.xml"] = f"<p:sld {ns}><p:cSld><p:spTree>{shapes}</p:spTree></p:cSld></p:sld>"
        if notes:
            parts[f"ppt/slides/_rels/slide{i}.xml.rels"] = _rels(
                [("rId1", "notesSlide", f"../notesSlides/notesSlide{i}.xml")]
            )
            parts[f"ppt/notesSlides/notesSlide{i}.xml"] = (
                f"<p:notes {ns}><p:cSld><p:spTree>{_sp([notes], 'body')}</p:spTree></p:cSld></p:notes>"
            )
    return _package(parts)


_SCAN_SOURCE = r"""
import io, json, sys
import pypdfium2 as pdfium
spec = json.load(sys.stdin)
out = pdfium.PdfDocument.new()
for kind, payload in spec["pages"]:
    src = pdfium.PdfDocument(bytes.fromhex(payload["pdf"]))
    if kind == "text":
        out.import_pages(src, [payload["page"]])
        continue
    # a scan: the page rendered to an image (cropped to its top), placed on an image-only page
    page = src[payload["page"]]
    w, h = page.get_size()
    crop_bottom = h * (1 - payload.get("keep", 1.0))
    image = page.render(scale=payload.get("dpi", 200) / 72, crop=(0, crop_bottom, 0, 0)).to_pil().convert("RGB")
    buf = io.BytesIO()
    image.save(buf, format="PDF", resolution=payload.get("dpi", 200))
    out.import_pages(pdfium.PdfDocument(buf.getvalue()))
data = io.BytesIO()
out.save(data)
sys.stdout.buffer.write(data.getvalue())
"""


def scanned_pdf(pages: list[tuple[str, dict]]) -> bytes:
    """A PDF of ``("text", {"pdf": bytes, "page": n})`` pages copied as they are and ``("scan", {"pdf":
    bytes, "page": n, "keep": share of the page's height from its top, "dpi": ...})`` pages turned into
    images without text (Pillow and pypdfium2 of the server venv, in a child process)."""
    spec = {"pages": [(kind, {**p, "pdf": p["pdf"].hex()}) for kind, p in pages]}
    done = subprocess.run(
        [str(SERVER_PYTHON), "-c", _SCAN_SOURCE], input=json.dumps(spec).encode(), capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout
