// Draws a page's saved Jupyter widgets without the Jupyter widgets HTML manager (embed-amd.js,
// 3.6 MB). Added by book/_ext/static_widgets.py, on pages whose saved widget state holds only
// the models below; other pages keep the full manager.
//
// - anywidget models (the attention explorer): the front end is imported once per page from
//   the static file the build wrote (`_esm_url`, `_css_url` in the model's state: the build
//   moved the ES module and its styles out of the state), and its render({model, el}) is called
//   with a small model: get/set/on/off work on the saved state, so the widget stays
//   interactive without a kernel; save_changes and send go nowhere, as there is no kernel.
// - The few ipywidgets controls a tqdm progress bar is made of (HBox, HTML, a progress bar),
//   drawn as plain HTML from their saved state.
//
// Each view (a <script type="application/vnd.jupyter.widget-view+json"> where the output was)
// is drawn into a <div class="widget-subarea"> inserted before it, as the HTML manager does.
(function () {
  "use strict";
  var STATE = 'script[type="application/vnd.jupyter.widget-state+json"]';
  var VIEW = 'script[type="application/vnd.jupyter.widget-view+json"]';
  var REF = "IPY_MODEL_";

  function readState() {
    var script = document.querySelector(STATE);
    return script ? JSON.parse(script.textContent).state || {} : {};
  }

  // A model of the saved state, with the part of the widget model API front ends use.
  function makeModel(id, saved) {
    var attrs = Object.assign({}, saved.state || {});
    var listeners = {};
    var model = {
      model_id: id,
      get: function (name) { return attrs[name]; },
      set: function (name, value) {
        if (name !== null && typeof name === "object") {
          Object.keys(name).forEach(function (k) { model.set(k, name[k]); });
          return;
        }
        if (attrs[name] === value) return;
        attrs[name] = value;
        emit("change:" + name, value);
        emit("change", undefined);
      },
      on: function (event, callback) {
        String(event).split(/\s+/).forEach(function (e) { (listeners[e] = listeners[e] || []).push(callback); });
      },
      off: function (event, callback) {
        if (!event) { listeners = {}; return; }
        String(event).split(/\s+/).forEach(function (e) {
          listeners[e] = callback ? (listeners[e] || []).filter(function (c) { return c !== callback; }) : [];
        });
      },
      save_changes: function () {}, // no kernel to tell
      send: function () {}, // no kernel to answer
    };
    function emit(event, value) {
      (listeners[event] || []).slice().forEach(function (callback) {
        try { callback(value); } catch (err) { console.error(err); }
      });
    }
    return model;
  }

  // One import (and one stylesheet) per front end and page, however many widgets use it.
  var modules = {};
  function frontEnd(model) {
    var url = model.get("_esm_url");
    var key = url || model.get("_esm") || "";
    if (!modules[key]) {
      var css = model.get("_css_url");
      if (css) {
        var link = document.createElement("link");
        link.rel = "stylesheet";
        link.href = new URL(css, document.baseURI).href;
        document.head.appendChild(link);
      } else if (model.get("_css")) {
        var style = document.createElement("style");
        style.textContent = model.get("_css");
        document.head.appendChild(style);
      }
      var src = url ? new URL(url, document.baseURI).href
        : URL.createObjectURL(new Blob([model.get("_esm") || ""], { type: "text/javascript" }));
      modules[key] = import(src).then(function (m) {
        var widget = m.default !== undefined ? m.default : m;
        return typeof widget === "function" ? widget() : widget;
      });
    }
    return modules[key];
  }

  var initialized = new WeakMap();
  function renderAnyWidget(model, el) {
    return frontEnd(model).then(function (widget) {
      if (!initialized.has(model)) {
        initialized.set(model, Promise.resolve(widget.initialize ? widget.initialize({ model: model }) : undefined));
      }
      return initialized.get(model).then(function () {
        return widget.render({ model: model, el: el });
      });
    });
  }

  // ipywidgets controls (what tqdm.notebook draws), from their saved state.
  function box(models, model, el, direction) {
    el.classList.add("widget-box", direction === "row" ? "widget-hbox" : "widget-vbox");
    el.style.display = "flex";
    el.style.flexDirection = direction;
    el.style.alignItems = direction === "row" ? "center" : "stretch";
    el.style.gap = "4px 8px";
    el.style.flexWrap = "wrap";
    el.style.fontSize = "13px"; // the widgets' own size (the HTML manager's --jp-widgets-font-size)
    return Promise.all((model.get("children") || []).map(function (ref) {
      var child = document.createElement("div");
      el.appendChild(child);
      return draw(models, String(ref).replace(REF, ""), child);
    }));
  }

  function html(model, el) {
    el.classList.add("widget-html");
    var description = model.get("description");
    if (description) el.appendChild(Object.assign(document.createElement("span"), { textContent: description + " " }));
    var content = document.createElement("span");
    content.className = "widget-html-content";
    content.innerHTML = model.get("value") || ""; // the notebook's own HTML output, as the manager shows it
    el.appendChild(content);
  }

  function label(model, el) {
    el.classList.add("widget-label");
    el.textContent = model.get("value") || "";
  }

  // The HTML manager's colours for bar_style.
  var BAR_COLOURS = { success: "#4caf50", info: "#00bcd4", warning: "#ff9800", danger: "#f44336" };
  function progress(models, model, el) {
    el.classList.add("widget-progress");
    var min = Number(model.get("min")) || 0, max = Number(model.get("max")), value = Number(model.get("value")) || 0;
    var fraction = max > min ? Math.min(Math.max((value - min) / (max - min), 0), 1) : 0;
    var style = models[String(model.get("style") || "").replace(REF, "")];
    var colour = (style && style.get("bar_color")) || BAR_COLOURS[model.get("bar_style")] || "#1976d2";
    var track = document.createElement("div");
    track.setAttribute("role", "progressbar");
    track.setAttribute("aria-valuemin", String(min));
    track.setAttribute("aria-valuemax", String(max));
    track.setAttribute("aria-valuenow", String(value));
    track.setAttribute("aria-label", model.get("description") || "progress");
    track.style.cssText = "width: 148px; height: 18px; border-radius: 4px; overflow: hidden; background: rgba(128,128,128,.2);";
    var bar = document.createElement("div");
    bar.style.cssText = "height: 100%; background: " + colour + "; width: " + (100 * fraction).toFixed(1) + "%;";
    track.appendChild(bar);
    el.appendChild(track);
  }

  function draw(models, id, el) {
    var model = models[id];
    if (!model) return Promise.reject(new Error("widget model " + id + " is not in the page's saved state"));
    el.dataset.modelId = id;
    var name = model.get("_model_name");
    if (model.get("_model_module") === "anywidget") return renderAnyWidget(model, el);
    if (name === "HBoxModel" || name === "BoxModel") return box(models, model, el, "row");
    if (name === "VBoxModel") return box(models, model, el, "column");
    if (name === "HTMLModel") return Promise.resolve(html(model, el));
    if (name === "LabelModel") return Promise.resolve(label(model, el));
    if (name === "FloatProgressModel" || name === "IntProgressModel") return Promise.resolve(progress(models, model, el));
    return Promise.reject(new Error("no view for widget model " + name));
  }

  function renderAll() {
    var saved = readState();
    var models = {};
    Object.keys(saved).forEach(function (id) { models[id] = makeModel(id, saved[id]); });
    document.querySelectorAll(VIEW).forEach(function (script) {
      var view = JSON.parse(script.textContent);
      var area = document.createElement("div");
      area.className = "widget-subarea";
      var el = document.createElement("div");
      el.className = "widget-lite";
      area.appendChild(el);
      script.parentNode.insertBefore(area, script);
      draw(models, view.model_id, el).then(function () {
        el.dataset.rendered = "true";
      }, function (err) {
        el.textContent = "This widget could not be drawn here; run the notebook to see it.";
        console.error(err);
      });
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", renderAll);
  else renderAll();
})();
