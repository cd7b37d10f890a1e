"""Build fixes for this book's pinned stack (Jupyter Book 1.0.4, Sphinx 7.4.7, myst-nb 1.4,
pydata-sphinx-theme under sphinx-book-theme 1.3).

1. Duplicated inline scripts. Sphinx 7.4 lists an inline script that an extension adds after
   the HTML builder has started (sphinx-togglebutton's and sphinx-thebe's settings, for
   example) twice: once as given, with the file name None, and once more from the registry,
   with the file name ''. The two copies differ only in that name, so Sphinx does not see them
   as the same, and every page declares `const THEBE_JS_URL` twice, which the browser reports
   as a SyntaxError. Here the first copy's name is made '' too, so that Sphinx's own
   de-duplication drops the second.

2. Alternative text for figures from notebook outputs. myst-nb writes an image/svg+xml (or
   PNG) output to a file and shows it with <img>, with no alt unless the cell's metadata sets
   one (`mystnb: image: alt: ...`), so the HTML writer falls back to the file's path, which
   tells a screen-reader user nothing. Where a cell sets no alt, one is derived here from the
   figure itself: Matplotlib's SVG backend writes every text of the figure as an XML comment
   at the start of the text's group (`<g id="text_7"><!-- attention weights -->`), inside the
   group of its axes and axis, so the figure's suptitle and each panel's title, axis labels
   and legend entries can be read back, e.g. "Figure with 3 panels. 1: score variance (x:
   d_k; y: variance of the score; legend: unscaled, scaled). 2: ...". A figure with no text
   to read (or a PNG) gets "Figure produced by code cell N of this page".

3. Accessible names (axe-core's label-content-name-mismatch, serious): the theme's search
   button and colour-mode switch, and myst-nb's "Show code cell source" toggle, carry an
   aria-label that leaves out their visible text. The templates in templates/ replace the
   theme's two components, and the toggle is written without the aria-label, so that each
   control's name is the text a reader sees.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from docutils import nodes

HERE = Path(__file__).resolve().parent
MAX_ALT = 600  # characters; a longer description is cut at a panel boundary


# 1. Duplicated inline scripts -------------------------------------------------------------


def _merge_inline_scripts(app, env):
    scripts = getattr(app.builder, "_js_files", None)
    if scripts is None:  # not an HTML builder
        return []
    merged = []
    for script in scripts:
        if script.filename is None:
            script = type(script)("", priority=script.priority, **script.attributes)
        if script not in merged:
            merged.append(script)
    scripts[:] = merged
    return []


# 2. Alternative text for notebook figures -------------------------------------------------

_TEX_SYMBOLS = {
    r"\cdot": "·", r"\times": "×", r"\sqrt": "√", r"\infty": "∞", r"\leq": "≤", r"\geq": "≥",
    r"\ell": "ℓ", r"\log": "log", r"\exp": "exp", r"\sin": "sin", r"\cos": "cos",
    r"\to": "→", r"\rightarrow": "→", r"\approx": "≈", r"\pm": "±", r"\top": "T",
}
_GREEK = "alpha beta gamma delta epsilon theta lambda mu pi rho sigma tau phi omega".split()
_GREEK_LETTERS = "αβγδεθλμπρστφω"


def plain_text(label: str) -> str:
    """Matplotlib's mathtext ($...$) as plain readable text: `$q \\cdot k / \\sqrt{d_k}$` ->
    `q · k / √d_k`."""
    text = label.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    text = re.sub(r"\\mathdefault\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\math(?:rm|bf|it|sf|tt|cal)\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\(?:text|operatorname)\{([^{}]*)\}", r"\1", text)
    for tex, symbol in _TEX_SYMBOLS.items():
        text = re.sub(re.escape(tex) + r"(?![A-Za-z])", symbol, text)
    for name, letter in zip(_GREEK, _GREEK_LETTERS):
        text = re.sub(r"\\" + name + r"(?![A-Za-z])", letter, text)
    text = re.sub(r"\\[,;:! ]", " ", text)  # TeX spaces
    text = re.sub(r"\\[A-Za-z]+", "", text)  # any other command
    text = text.replace("$", "").replace("{", "").replace("}", "").replace("\\", "")
    return re.sub(r"\s+", " ", text).strip()


def _label(group: ET.Element) -> str:
    """The text Matplotlib wrote as the comment that opens a text group, or ''."""
    for child in group:
        if child.tag is ET.Comment:
            return plain_text(child.text or "")
    return ""


def _gid(element: ET.Element) -> str:
    return element.get("id", "")


def _children(element: ET.Element, prefix: str) -> list[ET.Element]:
    return [c for c in element if isinstance(c.tag, str) and c.tag.endswith("}g") and _gid(c).startswith(prefix)]


def _first_y(element: ET.Element) -> float | None:
    """The y of the first translate() below a text group: where the text is drawn."""
    for g in element.iter():
        m = re.search(r"translate\(\s*[-\d.e]+[ ,]+([-\d.e]+)", g.get("transform", "") if isinstance(g.tag, str) else "")
        if m:
            return float(m.group(1))
    return None


def _font_scale(element: ET.Element) -> float:
    """The font size of a text group, as the scale of its glyphs (0.12 for 12 pt)."""
    for g in element.iter():
        m = re.search(r"scale\(\s*([\d.e]+)", g.get("transform", "") if isinstance(g.tag, str) else "")
        if m:
            return float(m.group(1))
    return 0.0


def _bbox(axes: ET.Element) -> tuple[float, float, float, float] | None:
    """(left, top, right, bottom) of an axes whose axis is drawn, from its background patch
    (the axes' first patch; with the axis off there is none, and the first patch is whatever
    the cell drew)."""
    for patch in _children(axes, "patch_")[:1]:
        for path in patch.iter():
            d = path.get("d") if isinstance(path.tag, str) else None
            if d:
                points = [(float(x), float(y)) for x, y in re.findall(r"([-\d.e]+)\s+([-\d.e]+)", d)]
                if points:
                    xs, ys = zip(*points)
                    return min(xs), min(ys), max(xs), max(ys)
    return None


def _texts(groups) -> list[str]:
    return [label for label in (_label(t) for t in groups) if label]


def _describe_axes(axes: ET.Element) -> tuple[str, str]:
    """(kind, description) of one axes: kind is "plot", "diagram", "colour scale" or "" (when
    there is nothing to say)."""
    texts = _children(axes, "text_")
    x_axis = _children(axes, "matplotlib.axis_")[0::2]
    y_axis = _children(axes, "matplotlib.axis_")[1::2]
    legend = _texts(t for lg in _children(axes, "legend_") for t in lg.iter() if isinstance(t.tag, str) and _gid(t).startswith("text_"))
    parts = []
    if x_axis or y_axis:
        # A plot: its title is drawn above the axes' top edge; texts inside are annotations.
        box = _bbox(axes)
        top = box[1] if box else None
        title = " ".join(_texts(t for t in texts if top is not None and (_first_y(t) or top) < top))
        xlabel = " ".join(_texts(t for a in x_axis for t in _children(a, "text_")))
        ylabel = " ".join(_texts(t for a in y_axis for t in _children(a, "text_")))
        drawn = {re.sub(r"_?\d+$", "", _gid(c)) for c in axes if isinstance(c.tag, str)}
        if box and not title and not legend and "line2d" not in drawn:
            width, height = box[2] - box[0], box[3] - box[1]
            if max(width, height) >= 8 * max(min(width, height), 1e-9):  # a colour bar
                label = xlabel or ylabel
                return ("colour scale", label) if label else ("", "")
        if xlabel:
            parts.append(f"x: {xlabel}")
        if ylabel:
            parts.append(f"y: {ylabel}")
    else:
        # A drawing (axis off): its title is the topmost text, set in a larger font than the
        # others (Matplotlib writes the size as the scale of the text's glyphs); the others are
        # its labels.
        placed = [(_first_y(t), _font_scale(t), _label(t)) for t in texts]
        placed = [(y, size, label) for y, size, label in placed if label and y is not None]
        title = ""
        if placed:
            y, size, label = min(placed)
            if all(size >= 1.08 * other for _, other, text in placed if text != label):
                title = label
        labels = list(dict.fromkeys(label for _, _, label in placed if label != title and len(label) > 1))
        if labels:
            parts.append("labels: " + ", ".join(labels[:12]) + (", …" if len(labels) > 12 else ""))
    if legend:
        parts.append("legend: " + ", ".join(legend))
    kind = "plot" if x_axis or y_axis else "diagram"
    if not title and not parts:
        return "", ""
    if title and parts:
        return kind, f"{title} ({'; '.join(parts)})"
    return kind, title or "; ".join(parts)


def describe_svg(data: bytes | str) -> str:
    """A one-paragraph description of a Matplotlib SVG: suptitle, then each labelled panel."""
    try:
        parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True))
        root = ET.fromstring(data, parser=parser)
    except ET.ParseError:
        return ""
    figure = next((g for g in root.iter() if isinstance(g.tag, str) and _gid(g).startswith("figure_")), None)
    if figure is None:
        return ""
    heading = " ".join(filter(None, (_label(t) for t in _children(figure, "text_"))))
    described = [_describe_axes(a) for a in _children(figure, "axes_")]
    panels = [(kind, text) for kind, text in described if kind in ("plot", "diagram")]
    scales = list(dict.fromkeys(text for kind, text in described if kind == "colour scale"))
    if len(panels) == 1:
        kind, text = panels[0]
        body = f"{kind.capitalize()}: {text}."
    elif panels:
        body = f"Figure with {len(panels)} panels. " + " ".join(
            f"{i}{' (diagram)' if kind == 'diagram' else ''}: {text}." for i, (kind, text) in enumerate(panels, 1)
        )
    else:
        body = ""
    if scales:
        body += f" Colour scale: {', '.join(scales)}."
    if heading:
        body = f"{heading}. {body}"
    body = body.strip()
    if len(body) > MAX_ALT:
        cut = body.rfind(". ", 0, MAX_ALT - 1)
        body = body[: cut + 1 if cut > 0 else MAX_ALT - 1] + " …"
    return body


def _image_file(app, docname: str, uri: str) -> Path:
    if uri.startswith("/"):  # relative to the source folder (how myst-nb refers to its outputs)
        return Path(app.srcdir) / uri.lstrip("/")
    return (Path(app.srcdir) / docname).parent / uri


def _add_figure_alt_text(app, doctree):
    docname = app.env.docname
    code_cells = 0
    for cell in doctree.findall(lambda n: isinstance(n, nodes.container) and n.get("nb_element") == "cell_code"):
        code_cells += 1
        for image in cell.findall(nodes.image):
            if image.get("alt"):  # the author's own, from the cell's metadata
                continue
            uri = image.get("uri", "")
            alt = ""
            if uri.endswith(".svg"):
                try:
                    alt = describe_svg(_image_file(app, docname, uri).read_bytes())
                except OSError:
                    alt = ""
            image["alt"] = alt or f"Figure produced by code cell {code_cells} of this page"


# 3. Accessible names ----------------------------------------------------------------------


def _visit_hide_code_cell(self, node):
    """myst-nb's visitor without the aria-label that hid the summary's visible text."""
    from html import escape

    classes = " ".join(node["classes"])
    self.body.append(f'<details class="admonition hide {classes}">\n')
    self.body.append("<summary>\n")
    self.body.append(f'<p class="collapsed admonition-title">{escape(node["prompt_show"])}</p>\n')
    self.body.append(f'<p class="expanded admonition-title">{escape(node["prompt_hide"])}</p>\n')
    self.body.append("</summary>\n")


def _depart_hide_code_cell(self, node):
    self.body.append("</details>\n")


def _config_inited(app, config):
    # After every extension's setup(): our templates go first, and myst-nb's node is registered.
    templates = str(HERE / "templates")
    if templates not in config.templates_path:
        config.templates_path.insert(0, templates)
    try:
        from myst_nb.sphinx_ import HideCodeCellNode
    except ImportError:
        return
    app.add_node(HideCodeCellNode, override=True, html=(_visit_hide_code_cell, _depart_hide_code_cell))


def setup(app):
    # A lighter site: the widgets' small loader, no Font Awesome script (see static_widgets.py).
    app.setup_extension("static_widgets")
    app.connect("config-inited", _config_inited)
    app.connect("env-updated", _merge_inline_scripts)
    # Before Sphinx's image collector (priority 500) reads the image nodes.
    app.connect("doctree-read", _add_figure_alt_text, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
