"""A Flask site that serves the embedded shop as HTML, and replays recorded episodes.

    python -m envs.webshop.site --port 3000 [--catalog-dir DIR] [--replay-dir DIR]

Every page is drawn from the same element lists as the agent's text observation
(``pages.page_elements``), and every button posts the very action string an agent would send
(``click[...]``, ``search[...]``) to a ``WebShopEnv``: what a person clicks is what the agent
does. It binds to 127.0.0.1 unless ``--host`` says otherwise.

A recorded episode is a JSON file ``{"split": "valid", "index": 3, "actions": [...]}`` in the
replay folder; ``/replay/<name>?step=k`` shows the page after its first k actions.
"""

from __future__ import annotations

import argparse
import json
import re
import uuid
from pathlib import Path

from flask import Flask, abort, redirect, request, url_for
from markupsafe import escape

from envs.common.cli_args import ArgumentParser, port
from envs.webshop.config import WebShopConfig
from envs.webshop.env import WebShopEnv, build_shop
from envs.webshop.pages import Element, Shop

_STYLE = """body{font-family:sans-serif;max-width:60em;margin:2em auto}
.instruction{background:#eef;padding:.5em} form{display:inline} button{margin:.2em}
.product-link{font-weight:bold} .option.chosen{background:#8c8;font-weight:bold}"""
_SAFE_NAME = re.compile(r"^[\w.-]+$")
#: Longest search query the site sends to the shop; a longer one is refused on the page, not dropped.
MAX_QUERY_CHARS = 1000


def _page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html><html><head><title>{escape(title)}</title><style>{_STYLE}</style>"
            f"</head><body>{body}</body></html>")


def render_html(elements: list[Element], act_url: str | None, chosen: set[str]) -> str:
    """HTML for a page's elements; buttons post their action to ``act_url`` (None: read-only)."""
    out, instruction_next = [], False
    for e in elements:
        text = escape(e.text)
        if instruction_next:
            out.append(f'<div class="instruction" id="instruction-text">{text}</div>')
            instruction_next = False
            continue
        if e.kind == "text":
            instruction_next = e.text == "Instruction:"
            out.append(f"<h4>{text}</h4>" if instruction_next else f"<p>{text}</p>")
            continue
        if e.kind == "heading":
            out.append(f"<h4>{text}</h4>")
            continue
        css = {"button": "btn", "link": "product-link", "option": "option"}[e.kind]
        if e.kind == "option" and e.text in chosen:
            css += " chosen"
        disabled = "" if act_url else " disabled"
        if e.kind == "button" and e.text == "Search":  # the search bar and its button
            out.append(f'<form method="post" action="{act_url or ""}"><input id="search_input" '
                       f'name="search_query" placeholder="Search..." required{disabled}>'
                       f'<button class="btn" id="search_button" type="submit"{disabled}>Search</button></form>')
            continue
        action = escape(f"click[{e.text.lower()}]")
        out.append(f'<form method="post" action="{act_url or ""}"><button class="{css}" name="action" '
                   f'value="{action}" type="submit"{disabled}>{text}</button></form>')
    return "\n".join(out)


def create_app(shop: Shop, config: WebShopConfig, replay_dir: str | Path | None = None) -> Flask:
    app = Flask(__name__)
    sessions: dict[str, WebShopEnv] = {}
    notes: dict[str, str] = {}  # per session: why the last request did nothing, shown once

    @app.get("/")
    def index():
        links = "".join(f'<li><a href="{url_for("start", split="valid", index=i)}">valid goal {i}</a></li>'
                        for i in range(10))
        replays = ""
        if replay_dir is not None:
            names = sorted(p.stem for p in Path(replay_dir).glob("*.json"))
            replays = "".join(f'<li><a href="{url_for("replay", name=n)}">{escape(n)}</a></li>' for n in names)
        return _page("WebShop", f"<h2>WebShop</h2><p>Start a goal (any index: /start/&lt;split&gt;/&lt;i&gt;):"
                                f"</p><ul>{links}</ul><h3>Recorded episodes</h3><ul>{replays}</ul>")

    @app.get("/start/<split>/<int:index>")
    def start(split: str, index: int):
        env = WebShopEnv(config, shop=shop)
        try:
            env.reset(split, index)
        except (ValueError, IndexError) as exc:
            abort(404, str(exc))
        sid = uuid.uuid4().hex[:12]
        sessions[sid] = env
        return redirect(url_for("show", sid=sid))

    @app.get("/s/<sid>")
    def show(sid: str):
        env = sessions.get(sid) or abort(404, f"no session {sid}")
        chosen = {v for _, v in env.state.options}
        note = notes.pop(sid, "")
        body = (f'<p class="note">{escape(note)}</p>' if note else "") + render_html(
            env.elements(), None if env.done else url_for("act", sid=sid), chosen)
        return _page("WebShop", body + f'<p><a href="{url_for("index")}">home</a></p>')

    @app.post("/s/<sid>/act")
    def act(sid: str):
        env = sessions.get(sid) or abort(404, f"no session {sid}")
        query = request.form.get("search_query")
        action = f"search[{query}]" if query is not None else request.form.get("action", "")
        if query is not None and not query.strip():
            notes[sid] = "Empty search: type the words to search for."
        elif query is not None and len(query) > MAX_QUERY_CHARS:
            notes[sid] = f"Search query too long: {len(query)} characters, at most {MAX_QUERY_CHARS}; shorten it."
        elif not env.done:
            env.step(action)
        return redirect(url_for("show", sid=sid))

    @app.get("/replay/<name>")
    def replay(name: str):
        if replay_dir is None or not _SAFE_NAME.match(name):
            abort(404, "no such recorded episode")
        path = Path(replay_dir) / f"{name}.json"
        if not path.is_file():
            abort(404, f"no recorded episode {name}")
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            actions, split, index = record["actions"], record["split"], record["index"]
            if not (isinstance(actions, list) and all(isinstance(a, str) for a in actions)):
                raise TypeError("actions must be a list of strings")
            env = WebShopEnv(config, shop=shop)
            env.reset(split, index)
        except (ValueError, KeyError, TypeError, IndexError) as exc:  # JSONDecodeError is a ValueError
            abort(422, f"{name}.json is not a recorded episode ({type(exc).__name__}: {exc}); it must be "
                       '{"split": "valid", "index": 3, "actions": ["search[...]", ...]}')
        step = max(0, min(request.args.get("step", 0, type=int), len(actions)))
        for action in actions[:step]:
            if env.done:
                break
            env.step(action)
        nav = [f'<a href="{url_for("replay", name=name, step=s)}">{label}</a>'
               for s, label in ((step - 1, "&lt; previous step"), (step + 1, "next step &gt;"))
               if 0 <= s <= len(actions)]
        done_by = escape(actions[step - 1]) if step else "(start)"
        head = (f"<h3>Replay {escape(name)}: step {step} of {len(actions)}, action {done_by}</h3>"
                f"<p>{' | '.join(nav)}</p>")
        chosen = {v for _, v in env.state.options}
        return _page(f"Replay {name}", head + render_html(env.elements(), None, chosen))

    return app


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: localhost only)")
    parser.add_argument("--port", type=port, default=3000, help="port to listen on (1-65535; 0: any free one)")
    parser.add_argument("--catalog-dir", default=None, help="catalog folder (default: generate in memory)")
    parser.add_argument("--replay-dir", default=None, help="folder of recorded episode JSON files")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    config = WebShopConfig(catalog_dir=args.catalog_dir)
    create_app(build_shop(config), config, args.replay_dir).run(host=args.host, port=args.port)


if __name__ == "__main__":
    main()
