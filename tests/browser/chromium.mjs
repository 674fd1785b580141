// What every browser script shares: its JSON argument, the JSON-lines report, Debian's Chromium
// launched headless with the flags this closed network needs, running a notebook cell via the UI, what
// a failed script leaves behind, reading the Multi-GPU sidebar (and what cuts its rank rows), and
// driving a player (its step buttons, its standalone page with the network refused).
import path from 'node:path';
import { chromium } from 'playwright-core';

export const cfg = JSON.parse(process.argv[2]);

const started = Date.now();

// one JSON line per step; `at`: seconds since the script started (steps.json says where a run's time went)
export function report(step, data = {}) {
  const at = (Date.now() - started) / 1000;
  process.stdout.write(JSON.stringify({ step, at, ...data }) + '\n');
}

// The flags every Chromium of the tests runs with: the closed network (no background requests), no GPU, and
// the HTTP and compiled-code cache in cfg.diskCache when given (the runs on one lab share it).
export function chromiumArgs(extraArgs = []) {
  return [
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--disable-dev-shm-usage',
    ...(cfg.diskCache ? [`--disk-cache-dir=${cfg.diskCache}`] : []),
    ...extraArgs
  ];
}

// Browser-wide flags the shared Chromium (browser_host.mjs) runs with, for the scripts that need them
// (placement_player.mjs opens a saved standalone page that loads its neighbour files).
export const SHARED_ARGS = ['--allow-file-access-from-files'];

// A page at `viewport`: with cfg.cdp, a page of the worker's running Chromium (tests/browser/browser_host.mjs;
// pages an earlier script left, killed at its timeout, are closed first); else a fresh persistent context in
// cfg.profile (the hub's users, each with a login of their own). Console errors and uncaught page errors of
// every page of the context are collected into consoleErrors (the tests fail on any). `newPage()` gives a further
// page at `viewport` either way; `close()` ends what this script opened: with cfg.cdp its pages (then it
// disconnects, leaving the browser up), else the context. With `reuse` (cfg.cdp only), the JupyterLab page an
// earlier script left with `keepPage` is taken instead of a new one (`reused`: true): its app is loaded already.
export async function openBrowser({
  viewport = { width: 1280, height: 900 },
  extraArgs = [],
  reuse = false
} = {}) {
  let context, newPage, close;
  let kept = null;
  if (cfg.cdp) {
    const missing = extraArgs.filter(a => !SHARED_ARGS.includes(a));
    if (missing.length) {
      throw new Error(
        `the shared Chromium does not run with ${missing}: add them to SHARED_ARGS`
      );
    }
    const browser = await chromium.connectOverCDP(cfg.cdp);
    context = browser.contexts()[0];
    for (const p of context.pages()) {
      if (reuse && !kept && (await isKept(p))) {
        kept = p;
        await p.setViewportSize(viewport); // this connection's page size (shotCell reads it), as it was
      } else {
        await p.close();
      }
    }
    newPage = async () => {
      const p = await context.newPage();
      await p.setViewportSize(viewport); // as a launched context's viewport gives every page
      return p;
    };
    close = async ({ keep = null } = {}) => {
      await Promise.all(
        context
          .pages()
          .filter(p => p !== keep)
          .map(p => p.close().catch(() => {}))
      );
      await browser.close(); // a connected client's close disconnects, leaving the pages it did not close
    };
  } else {
    context = await chromium.launchPersistentContext(cfg.profile, {
      executablePath: cfg.chromium,
      headless: true,
      viewport,
      args: chromiumArgs(extraArgs)
    });
    newPage = () => context.newPage();
    close = () => context.close();
  }
  const consoleErrors = [];
  const watch = (p, tag) => {
    p.on('console', msg => {
      if (msg.type() === 'error') {
        consoleErrors.push(
          `${tag}console: ${msg.text()} (${msg.location().url}:${msg.location().lineNumber}) at ${new Date().toISOString()}`
        );
      }
    });
    p.on('pageerror', err =>
      consoleErrors.push(`${tag}${String(err)} at ${new Date().toISOString()}`)
    );
  };
  const page = kept ?? context.pages()[0] ?? (await newPage());
  watch(page, '');
  context.on('page', p => {
    if (p !== page) {
      watch(p, 'other page: ');
    }
  });
  return { context, page, consoleErrors, newPage, close, reused: !!kept };
}

// Wait until the current notebook's page has not changed for `quiet` ms (widgets that update from kernel threads,
// and plotly, have drawn), or `most` ms at most (a live view redraws each second and never goes quiet).
export async function settled(page, quiet = 400, most = 1500) {
  await page.evaluate(
    ([quiet, most]) =>
      new Promise(done => {
        const finish = () => {
          observer.disconnect();
          clearTimeout(still);
          clearTimeout(cap);
          done();
        };
        let still = setTimeout(finish, quiet);
        const cap = setTimeout(finish, most);
        const observer = new MutationObserver(() => {
          clearTimeout(still);
          still = setTimeout(finish, quiet);
        });
        observer.observe(window.jupyterapp.shell.currentWidget.node, {
          subtree: true,
          childList: true,
          attributes: true,
          characterData: true
        });
      }),
    [quiet, most]
  );
}

// Run cell `index` of the active notebook through JupyterLab's command; wait for it unless told not to.
export async function runCell(page, index, wait = true) {
  await page.evaluate(
    async ([i, w]) => {
      const panel = window.jupyterapp.shell.currentWidget;
      panel.content.activeCellIndex = i;
      const done = window.jupyterapp.commands.execute('notebook:run-cell');
      if (w) {
        await done;
      }
    },
    [index, wait]
  );
}

// Wait until JupyterLab shows a notebook whose kernel is idle and whose cells are there.
export async function notebookReady(page, timeout, polling = 200) {
  await page.waitForFunction(
    () => {
      const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
      return !!(
        w &&
        w.sessionContext?.session?.kernel?.status === 'idle' &&
        w.content.widgets.length > 0
      );
    },
    null,
    { timeout, polling }
  );
}

// Open cfg.notebook in JupyterLab and wait until its kernel is idle and its cells are shown. Each run gets
// a workspace of its own: the shared server's default workspace would reopen the notebooks of earlier
// tests, whose saved widget outputs have no model any more (an error in the console). On a `reused` page
// (openBrowser's; keepPage left it with nothing open and its side areas as a new page has them) the
// notebook is opened in the running app, as the file browser opens one.
export async function openNotebook(page, timeout, reused = false) {
  if (reused) {
    await page.evaluate(async path => {
      window.__mgpuKept = null;
      const app = window.jupyterapp;
      const opened = await app.commands.execute('docmanager:open', { path });
      for (const w of Array.from(app.shell.widgets('main'))) {
        if (w !== opened) {
          w.close(); // the launcher, as a new page has only the notebook
        }
      }
    }, cfg.notebook);
  } else {
    const workspace = `t${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
    await page.goto(
      `${cfg.url}lab/workspaces/${workspace}/tree/${cfg.notebook}?token=${cfg.token}`,
      { timeout }
    );
  }
  await notebookReady(page, timeout);
  if (!reused) {
    await page.evaluate(() => {
      // what the side areas show (collapsed or not, which panel): keepPage leaves the page so, or not at all
      window.__mgpuSides = () => {
        const l = window.jupyterapp.shell.saveLayout();
        const side = a => [!!a?.collapsed, a?.currentWidget?.id ?? null];
        return JSON.stringify({
          left: side(l.leftArea),
          right: side(l.rightArea),
          down: (l.downArea?.widgets ?? []).map(w => w.id)
        });
      };
      window.__mgpuNewSides = window.__mgpuSides();
    });
  }
}

// Whether `page` is a JupyterLab page of this lab that keepPage left (an earlier script's, ended cleanly).
async function isKept(page) {
  return page
    .evaluate(url => window.__mgpuKept === url, cfg.url)
    .catch(() => false);
}

// Leave the page for the next script that asks openBrowser to `reuse` one (saves it loading JupyterLab, about
// 3 s of a core): every document closed (each saved and its kernel shut down before), the side areas as they
// were when the page was new. True if the page now looks as a new one would; else why not (it is not kept).
export async function keepPage(page) {
  return page
    .evaluate(async url => {
      const app = window.jupyterapp;
      // the launcher JupyterLab opens once the last document is closed is not a document
      const open = () =>
        Array.from(app.shell.widgets('main')).filter(
          w => !w.id.startsWith('launcher')
        );
      open().forEach(w => w.close());
      for (let i = 0; i < 40 && open().length; i++) {
        await new Promise(r => setTimeout(r, 50));
      }
      const fresh = JSON.parse(window.__mgpuNewSides ?? 'null');
      if (!fresh || open().length) {
        return `still open: ${open().map(w => w.id)}; new sides ${window.__mgpuNewSides}`;
      }
      for (const [area, [collapsed, id]] of [
        ['left', fresh.left],
        ['right', fresh.right]
      ]) {
        if (id) {
          app.shell.activateById(id);
        }
        if (collapsed) {
          area === 'left'
            ? app.shell.collapseLeft()
            : app.shell.collapseRight();
        }
      }
      await new Promise(r => requestAnimationFrame(() => r()));
      if (window.__mgpuSides() !== window.__mgpuNewSides) {
        return `sides ${window.__mgpuSides()} not ${window.__mgpuNewSides}`;
      }
      window.__mgpuKept = url;
      return true;
    }, cfg.url)
    .catch(e => String(e));
}

// Shut the current notebook's kernel down (its cluster with it), so that later tests in the shared lab
// neither wait behind its engines nor see its card in the sidebar; errors are ignored (a closing page).
export async function shutdownKernel(page) {
  await page
    .evaluate(() =>
      window.jupyterapp?.shell.currentWidget?.sessionContext?.shutdown()
    )
    .catch(() => {});
}

// A step threw: report 'error' with its stack and the console errors so far, save the page as `shot` in
// cfg.artifacts, and make the script exit non-zero.
export async function reportError(err, page, shot, consoleErrors) {
  report('error', {
    message: String((err && err.stack) || err),
    consoleErrors
  });
  await page
    .screenshot({ path: path.join(cfg.artifacts, shot), fullPage: true })
    .catch(() => {});
  process.exitCode = 1;
}

// What the Multi-GPU sidebar shows: whether its stream is live, the status bar item, and each cluster
// card (id, status, world size, each rank's bar, its sparklines' lengths).
export async function sidebar(page) {
  return page.evaluate(() => ({
    live:
      document.querySelector('#jupyter-mgpu-panel .jp-mgpu-live')
        ?.textContent ?? null,
    status: document.querySelector('.jp-mgpu-status')?.textContent ?? null,
    clusters: Array.from(
      document.querySelectorAll('#jupyter-mgpu-panel .jp-mgpu-cluster')
    ).map(card => ({
      id: card.dataset.clusterId,
      status: card.dataset.status,
      worldSize: Number(card.dataset.worldSize),
      ranks: Array.from(card.querySelectorAll('.jp-mgpu-rank')).map(r => ({
        rank: Number(r.dataset.rank),
        pid: Number(r.dataset.pid),
        used: Number(r.dataset.usedBytes),
        total: Number(r.dataset.totalBytes),
        width: r.querySelector('.jp-mgpu-bar-fill')?.style.width ?? null
      })),
      sparkPoints: Array.from(card.querySelectorAll('polyline')).map(
        p => (p.getAttribute('points') ?? '').split(' ').length
      )
    }))
  }));
}

// What cuts the rank rows of the sidebar's card `clusterId` (issue 47): every element of a row (the
// row, the card and its list too) wider inside than its box (scrollWidth > clientWidth: cut, or
// scrolling sideways), every one that reaches past the panel's visible right edge, and every text that
// ends in an ellipsis. Also the panel's width and the first rows' text, for the report.
export async function rankRowsCut(page, clusterId) {
  return page.evaluate(id => {
    const panel = document.getElementById('jupyter-mgpu-panel');
    const box = panel.getBoundingClientRect();
    // the panel's content box (less its scrollbar), within the side area that shows it
    const edge = Math.min(
      panel.parentElement.getBoundingClientRect().right,
      box.left + panel.clientLeft + panel.clientWidth
    );
    const card = panel.querySelector(
      `.jp-mgpu-cluster[data-cluster-id="${id}"]`
    );
    if (!card) {
      return { panelWidth: Math.round(box.width), rows: 0, cut: ['no card'] };
    }
    const rows = Array.from(card.querySelectorAll('.jp-mgpu-rank'));
    const name = el =>
      `${el.tagName.toLowerCase()}.${String(el.getAttribute('class') ?? '').split(' ')[0]}`;
    const cut = [];
    const list = card.querySelector('.jp-mgpu-ranks');
    for (const el of [card, list]) {
      if (el.scrollWidth > el.clientWidth) {
        cut.push(`${name(el)}: ${el.scrollWidth} px inside ${el.clientWidth}`);
      }
    }
    for (const row of rows) {
      const who = `rank ${row.dataset.rank}`;
      for (const el of [row, ...row.querySelectorAll('*')]) {
        if (!el.checkVisibility()) {
          continue;
        }
        if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth) {
          cut.push(
            `${who} ${name(el)}: ${el.scrollWidth} px inside ${el.clientWidth}`
          );
        }
        const r = el.getBoundingClientRect();
        if (r.width > 0 && r.right > edge + 0.5) {
          cut.push(
            `${who} ${name(el)}: ends at ${r.right.toFixed(1)} px, past the panel's edge at ${edge.toFixed(1)}`
          );
        }
      }
      const texts = document.createTreeWalker(row, NodeFilter.SHOW_TEXT);
      for (let t = texts.nextNode(); t; t = texts.nextNode()) {
        if (t.textContent.trimEnd().endsWith('…')) {
          cut.push(`${who}: "${t.textContent}" ends in an ellipsis`);
        }
      }
    }
    return {
      panelWidth: Math.round(box.width),
      edge: Math.round(edge),
      rows: rows.length,
      cut,
      text: rows.slice(0, 4).map(r => r.innerText)
    };
  }, clusterId);
}

// Wait until the player counter `counter` (a selector) reads its last step ("step n / n").
export async function untilLastStep(page, counter, timeout) {
  await page.waitForFunction(
    c => {
      const m = /step (\d+) \/ (\d+)/.exec(
        document.querySelector(c).textContent
      );
      return m && m[1] === m[2];
    },
    counter,
    { timeout, polling: 100 }
  );
}

// While Run All runs (until window.__mgpuDone): each change of what `read(node)` returns for cell `k`'s node,
// recorded in the page whenever the cell changes (a MutationObserver, not round trips a busy machine makes
// rare, which can miss a whole live run). `read` runs in the page and returns null while there is nothing
// to read; a reading is kept when one of `fields` (default: all) differs from the last one kept.
export async function watchCell(
  page,
  k,
  read,
  { fields = null, observe = {} } = {}
) {
  const watch = (k, read, fields, observe) => {
    const c = window.jupyterapp.shell.currentWidget.content.widgets[k];
    const seen = (window.__mgpuWatched = []);
    const record = () => {
      const state = read(c.node);
      const last = seen[seen.length - 1];
      if (
        state &&
        (!last ||
          (fields || Object.keys(state)).some(f => last[f] !== state[f]))
      ) {
        seen.push(state);
      }
    };
    new MutationObserver(record).observe(c.node, {
      subtree: true,
      childList: true,
      ...observe
    });
    record();
  };
  await page.evaluate(
    `(${watch})(${k}, ${read}, ${JSON.stringify(fields)}, ${JSON.stringify(observe)})`
  );
  await page.waitForFunction(() => window.__mgpuDone, null, {
    timeout: 0,
    polling: 200
  });
  return page.evaluate(() => window.__mgpuWatched);
}

// Step the player inside `sel` forward `n` times with its button; `read()` after each step and before
// the first: n + 1 readings.
export async function stepForward(page, sel, n, read) {
  const seen = [await read()];
  for (let i = 1; i <= n; i++) {
    await page.click(`${sel} .mgpu-player-step-forward`);
    await page.waitForFunction(
      ([s, k]) =>
        new RegExp(`^step ${k} /`).test(
          document.querySelector(`${s} .mgpu-player-counter`).textContent
        ),
      [sel, i],
      { timeout: 10000 }
    );
    seen.push(await read());
  }
  return seen;
}

// Jump the player inside `sel` to its last step, then one step back; `read()` at each.
export async function lastAndBack(page, sel, read) {
  await page.click(`${sel} .mgpu-player-last`);
  await page.waitForTimeout(300);
  const end = await read();
  await page.click(`${sel} .mgpu-player-step-back`);
  await page.waitForTimeout(300);
  return { end, back: await read() };
}

// A new page (from `newPage`, openBrowser's) that loads file:// URLs only: every other request is refused and
// its URL kept in `requests`.
export async function offlinePage(newPage) {
  const page = await newPage();
  const requests = [];
  await page.route('**/*', route => {
    const u = route.request().url();
    if (u.startsWith('file://')) {
      return route.continue();
    }
    requests.push(u);
    return route.abort();
  });
  return { page, requests };
}

// Play the one player of a standalone page at speed 8 and wait until it shows its last step. With
// `lastSteps`, its slider is moved that many steps before the end first (a 640-step schedule takes 20 s
// to play whole, and its first steps are stepped through in the notebook already).
export async function playToEnd(page, timeout, lastSteps = null) {
  if (lastSteps !== null) {
    await page.evaluate(k => {
      const slider = document.querySelector('.mgpu-player-slider');
      slider.value = String(Math.max(0, Number(slider.max) - k));
      slider.dispatchEvent(new Event('input'));
    }, lastSteps);
  }
  await page.selectOption('.mgpu-player-speed', '8');
  await page.click('.mgpu-player-play');
  await untilLastStep(page, '.mgpu-player-counter', timeout);
}

// What the current notebook's layout gets wrong: every output element that reaches past its cell's
// output area (cut off, or needing sideways scrolling), every line of text output that the cell's width
// makes wrap, and every code cell whose source is wider than its editor. With `areaScroll`, also every
// output area that scrolls sideways even where no child is measured past it.
export async function notebookLayout(page, { areaScroll = false } = {}) {
  return page.evaluate(areaScroll => {
    const out = { overflow: [], wrapped: [], wide_code: [] };
    const probe = document.createElement('span');
    window.jupyterapp.shell.currentWidget.content.widgets.forEach((cell, i) => {
      if (cell.model.type !== 'code') {
        return;
      }
      const source = cell.model.sharedModel.getSource().split('\n')[0];
      const editor = cell.node.querySelector('.cm-scroller'); // code the reader must scroll sideways to see
      if (editor && editor.scrollWidth > editor.clientWidth + 2) {
        out.wide_code.push({
          cell: i,
          source,
          past: editor.scrollWidth - editor.clientWidth
        });
      }
      for (const area of cell.node.querySelectorAll('.jp-OutputArea-output')) {
        const box = area.getBoundingClientRect();
        if (box.width === 0) {
          continue;
        }
        const past = new Set(); // report the outermost element that reaches past the edge, not its children
        for (const el of area.querySelectorAll('*')) {
          const r = el.getBoundingClientRect();
          if (
            r.width === 0 ||
            r.height === 0 ||
            getComputedStyle(el).visibility === 'hidden'
          ) {
            continue;
          }
          if (r.right > box.right + 2 || r.left < box.left - 2) {
            past.add(el);
            if (past.has(el.parentElement)) {
              continue;
            }
            const what =
              el.tagName.toLowerCase() +
              (el.getAttribute('class')
                ? '.' + String(el.getAttribute('class')).split(' ')[0]
                : '');
            out.overflow.push({
              cell: i,
              source,
              element: what,
              past: Math.round(
                Math.max(r.right - box.right, box.left - r.left)
              ),
              width: Math.round(box.width)
            });
          }
        }
        if (areaScroll && area.scrollWidth > area.clientWidth + 2) {
          // scrolls sideways even where no child is measured past it
          out.overflow.push({
            cell: i,
            source,
            element: 'output area',
            past: area.scrollWidth - area.clientWidth,
            width: Math.round(box.width)
          });
        }
        // tables and printed results; error messages (stderr) are sentences and may wrap
        for (const pre of area.querySelectorAll(
          '.jp-RenderedText:not([data-mime-type="application/vnd.jupyter.stderr"]) pre'
        )) {
          probe.textContent = 'M'.repeat(100);
          probe.style.cssText =
            'position:absolute; visibility:hidden; white-space:pre';
          pre.appendChild(probe);
          const charW = probe.getBoundingClientRect().width / 100;
          pre.removeChild(probe);
          const fit = Math.floor(pre.clientWidth / charW);
          const long = pre.textContent.split('\n').filter(l => l.length > fit);
          if (long.length) {
            out.wrapped.push({ cell: i, source, fit, lines: long.slice(0, 5) });
          }
        }
      }
    });
    return out;
  }, areaScroll);
}

// Screenshot of cell `index` of the current notebook (input and outputs) to `file`, growing the viewport's
// height while it is taken when the cell is taller (the notebook scrolls inside the page, so a plain
// element screenshot would cut the cell at the viewport's bottom).
export async function shotCell(page, index, file) {
  const vp = page.viewportSize();
  const height = await page.evaluate(k => {
    document
      .querySelectorAll('[data-mgpu-shot]')
      .forEach(n => n.removeAttribute('data-mgpu-shot'));
    const node = window.jupyterapp.shell.currentWidget.content.widgets[k].node;
    node.setAttribute('data-mgpu-shot', '1');
    return node.getBoundingClientRect().height;
  }, index);
  const taller = height + 160 > vp.height;
  if (taller) {
    await page.setViewportSize({
      width: vp.width,
      height: Math.min(6000, Math.ceil(height + 200))
    });
    await page.waitForTimeout(400); // widgets (plotly) lay themselves out again for the new size
  }
  // scrolled, then two frames: the one that lays the cell out where it now is, and one painted after it
  await page.evaluate(
    () =>
      new Promise(done => {
        document
          .querySelector('[data-mgpu-shot]')
          .scrollIntoView({ block: 'center' });
        requestAnimationFrame(() => requestAnimationFrame(done));
      })
  );
  await page.locator('[data-mgpu-shot]').screenshot({ path: file });
  if (taller) {
    await page.setViewportSize(vp);
  }
}
