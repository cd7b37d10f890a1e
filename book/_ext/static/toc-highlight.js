/* The page's "Contents" (right-hand sidebar) highlights the section being read.

   pydata-sphinx-theme 0.17.1 (pinned by sphinx-book-theme 1.3.0) moves the highlight only when a
   heading crosses the top 30% of the window, so in a long section, or after scrolling back up
   past a heading, it stays on a section that is no longer on screen (the theme's issue 1965,
   reworked in later releases). Here the highlight is computed from where the headings are: the
   section being read is the one whose heading is the last above a line 30% down the window
   (none above the line: nothing is highlighted). A link clicked in the Contents, or a page
   opened at an anchor, stays highlighted until the reader scrolls again, even when the page is
   too short below it for its heading to reach the line. The theme's own code still runs; when
   it moves the highlight elsewhere, this puts it back (tests/browser/test_layout.py checks the
   highlight while scrolling down and back up a chapter). */
(function () {
  "use strict";

  const LINE = 0.3; // the reading line, as a fraction of the window's height

  function setup() {
    const nav = document.querySelector("#pst-page-toc-nav");
    if (!nav) return;
    const links = Array.from(nav.querySelectorAll("a[href^='#']"));
    const entries = Array.from(nav.querySelectorAll(".toc-entry"));
    const targets = [];
    links.forEach((link) => {
      const id = decodeURIComponent(link.hash.slice(1));
      const target = id && document.getElementById(id);
      if (!target) return;
      const heading = target.querySelector(":is(h1,h2,h3,h4,h5,h6)") || target;
      targets.push([heading, link]);
    });
    if (!targets.length) return;

    let pinned = null;

    function wanted() {
      if (pinned) return pinned;
      const line = window.innerHeight * LINE;
      let best = null;
      let bestTop = -Infinity;
      for (const [heading, link] of targets) {
        const top = heading.getBoundingClientRect().top;
        if (top <= line && top >= bestTop) {
          best = link;
          bestTop = top;
        }
      }
      return best;
    }

    function shown(link) {
      return links.every((el) => el.classList.contains("active") === (el === link));
    }

    function apply() {
      const link = wanted();
      if (shown(link)) return;
      links.forEach((el) => {
        el.classList.toggle("active", el === link);
        if (el === link) el.setAttribute("aria-current", "true");
        else el.removeAttribute("aria-current");
      });
      entries.forEach((el) => el.classList.toggle("active", !!link && el.contains(link)));
    }

    let frame = 0;
    function schedule() {
      if (!frame) {
        frame = requestAnimationFrame(() => {
          frame = 0;
          apply();
        });
      }
    }

    function pinTo(hash) {
      const found = targets.find(([, link]) => link.hash === hash);
      pinned = found ? found[1] : null;
      schedule();
    }

    nav.addEventListener("click", (event) => {
      const link = event.target.closest("a[href^='#']");
      if (link) pinTo(link.hash);
    });
    window.addEventListener("hashchange", () => pinTo(window.location.hash));
    const unpin = () => {
      if (pinned) {
        pinned = null;
        schedule();
      }
    };
    ["wheel", "touchmove", "keydown"].forEach((name) =>
      window.addEventListener(name, unpin, { passive: true }),
    );
    window.addEventListener("scroll", schedule, { passive: true });
    window.addEventListener("resize", schedule);
    new MutationObserver(() => {
      if (!shown(wanted())) apply();
    }).observe(nav, { attributes: true, attributeFilter: ["class"], subtree: true });

    if (window.location.hash) pinTo(window.location.hash);
    apply();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setup);
  } else {
    setup();
  }
})();
