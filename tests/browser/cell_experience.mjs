// %%mgpu cells in a real JupyterLab (Debian's Chromium, playwright-core): each rank's last value renders
// as the notebook renders it (DataFrame, plotly figure) under a rank label, equal values show once, a
// text progress bar redraws live per rank while the cell runs, tqdm.notebook's widgets render per rank,
// --show 0 folds rank 1's output, and a failure on one rank shows one line with its traceback folded under
// it. Called by tests/browser/test_cell_experience_in_lab.py with
// {url, token, notebook, artifacts, chromium, profile, cells: {name: index}}; prints one JSON line per step
// (what each cell shows) and a final {"step": "done"} with the console errors and the layout.
import fs from 'node:fs';
import path from 'node:path';
import {
  cfg,
  report,
  openBrowser,
  openNotebook,
  runCell,
  reportError,
  notebookLayout,
  shotCell,
  shutdownKernel
} from './chromium.mjs';

const STEP_TIMEOUT = 90000;
const C = cfg.cells;

// report, and keep the step's name in progress.log: the last step a run that hung got to
function step(name, data) {
  fs.appendFileSync(
    path.join(cfg.artifacts, 'progress.log'),
    `${new Date().toISOString()} ${name}\n`
  );
  report(name, data);
}

const { page, consoleErrors, close } = await openBrowser({
  viewport: { width: 1280, height: 900 }
});

// Run cell `index` and wait for it, failing with the cell's name after STEP_TIMEOUT (not hanging).
async function run(index) {
  const name = Object.keys(C).find(k => C[k] === index);
  let timer;
  const late = new Promise((_, no) => {
    timer = setTimeout(
      () => no(new Error(`cell ${name} still runs after ${STEP_TIMEOUT} ms`)),
      STEP_TIMEOUT
    );
  });
  try {
    await Promise.race([runCell(page, index), late]);
  } finally {
    clearTimeout(timer);
  }
}

// A picture of cell `index` (its input and outputs) in the artifacts.
const shot = (index, name) =>
  shotCell(page, index, path.join(cfg.artifacts, `${name}.png`));

// What cell `index` shows: its whole text, and each output in order (its mime type, text, the rank
// label it is, the rows of a table it holds, the data of a plotly plot it holds, a widget progress bar).
async function cellOutputs(index) {
  return page.evaluate(i => {
    const cell = window.jupyterapp.shell.currentWidget.content.widgets[i];
    const items = Array.from(
      cell.node.querySelectorAll('.jp-OutputArea-output')
    ).map(o => {
      const plot = o.matches('.js-plotly-plot')
        ? o
        : o.querySelector('.js-plotly-plot');
      return {
        mime: o.dataset.mimeType ?? null,
        text: o.innerText,
        label: o.querySelector('.mgpu-rank-label')?.textContent ?? null,
        labels: Array.from(o.querySelectorAll('.mgpu-rank-label')).map(
          l => l.textContent
        ),
        table: Array.from(o.querySelectorAll('table.dataframe tr')).map(tr =>
          Array.from(tr.children).map(td => td.textContent.trim())
        ),
        plot: plot
          ? {
              y: Array.from(plot.data?.[0]?.y ?? []),
              type: plot.data?.[0]?.type ?? null,
              bars: plot.querySelectorAll('.bars .point').length,
              width: plot.getBoundingClientRect().width
            }
          : null,
        progress: o.querySelector('.widget-hprogress')
          ? {
              text: o.innerText,
              width:
                o.querySelector('.widget-hprogress .progress-bar')?.style
                  .width ?? null,
              success: !!o.querySelector(
                '.widget-hprogress .progress-bar-success'
              )
            }
          : null,
        live: o.querySelector('.mgpu-live')?.textContent ?? null
      };
    });
    return {
      text: cell.node.querySelector('.jp-Cell-outputArea')?.innerText ?? '',
      items,
      count: cell.model.executionCount
    };
  }, index);
}

// The text of the live area of cell `index` (null when there is none).
const liveText = index =>
  page.evaluate(i => {
    const node =
      window.jupyterapp.shell.currentWidget.content.widgets[
        i
      ].node.querySelector('.mgpu-live');
    return node ? node.textContent : null;
  }, index);

try {
  await openNotebook(page, STEP_TIMEOUT);
  await run(C.init);
  await run(C.pids);
  const pidText = (await cellOutputs(C.pids)).text;
  step('started', {
    init: (await cellOutputs(C.init)).text,
    pids: (/pids ([\d ]+)/.exec(pidText)?.[1] ?? '')
      .trim()
      .split(/\s+/)
      .map(Number),
    pidText
  });

  // 1. a DataFrame per rank: two HTML tables, each under its rank label
  await run(C.frame);
  await shot(C.frame, '01_dataframes');
  step('frame', await cellOutputs(C.frame));

  // 2. a plotly figure per rank: rendered by JupyterLab's plotly renderer
  await run(C.plotly);
  await page
    .waitForFunction(
      i =>
        window.jupyterapp.shell.currentWidget.content.widgets[
          i
        ].node.querySelectorAll('.js-plotly-plot .bars .point').length >= 4,
      C.plotly,
      { timeout: 20000, polling: 200 }
    )
    .catch(() => {}); // the assertions say what is missing
  await shot(C.plotly, '02_plotly');
  step('plotly', await cellOutputs(C.plotly));

  // 3. the same tensor on both ranks: one line
  await run(C.reduce);
  await shot(C.reduce, '03_all_reduce');
  step('reduce', await cellOutputs(C.reduce));

  // 4. a text progress bar: the live area while the cell runs, every ~0.5 s; one line per rank at the end.
  // Its frames are read in the page every 50 ms (each new text once), so a busy machine's slow round trips
  // do not thin them out
  await page.evaluate(i => {
    const t0 = Date.now();
    window.__mgpuFrames = [];
    window.__mgpuFrameWatch = setInterval(() => {
      const node =
        window.jupyterapp.shell.currentWidget.content.widgets[
          i
        ].node.querySelector('.mgpu-live');
      const text = node ? node.textContent : null;
      if (text && window.__mgpuFrames.at(-1)?.text !== text) {
        window.__mgpuFrames.push({ ms: Date.now() - t0, text });
      }
    }, 50);
  }, C.tqdm);
  await runCell(page, C.tqdm, false);
  const t0 = Date.now();
  let shotTaken = false;
  while (Date.now() - t0 < 60000) {
    const seen = await page.evaluate(
      i => ({
        count: window.__mgpuFrames.length,
        running:
          window.jupyterapp.shell.currentWidget.content.widgets[i].model
            .executionCount === null
      }),
      C.tqdm
    );
    if (seen.count >= 2 && !shotTaken) {
      await shot(C.tqdm, '04_progress_live');
      shotTaken = true;
    }
    if (!seen.running && (seen.count > 0 || Date.now() - t0 > 15000)) {
      break;
    }
    await page.waitForTimeout(100);
  }
  await page.waitForFunction(
    i =>
      window.jupyterapp.shell.currentWidget.content.widgets[i].model
        .executionCount !== null,
    C.tqdm,
    { timeout: STEP_TIMEOUT, polling: 200 }
  );
  await page.waitForTimeout(300);
  const frames = await page.evaluate(() => {
    clearInterval(window.__mgpuFrameWatch);
    return window.__mgpuFrames;
  });
  await shot(C.tqdm, '05_progress_done');
  step('tqdm', {
    frames,
    appearedAfter: frames.length ? frames[0].ms : null,
    end: await cellOutputs(C.tqdm),
    liveAtEnd: await liveText(C.tqdm)
  });

  // 5. tqdm.notebook: a widget progress bar per rank, relayed through ipyparallel's comms
  await run(C.widget);
  await page
    .waitForFunction(
      i =>
        window.jupyterapp.shell.currentWidget.content.widgets[
          i
        ].node.querySelectorAll('.widget-hprogress .progress-bar-success')
          .length >= 2,
      C.widget,
      { timeout: 20000, polling: 200 }
    )
    .catch(() => {}); // done: the bars' last updates arrived over the comms (the assertions say what is missing)
  await shot(C.widget, '06_notebook_progress');
  step('widget', await cellOutputs(C.widget));

  // 6. --show 0: rank 1's line folded; a click on the summary shows it
  await run(C.show);
  const folded = await cellOutputs(C.show);
  const details = await page.evaluate(i => {
    const d = window.jupyterapp.shell.currentWidget.content.widgets[
      i
    ].node.querySelector('details.mgpu-hidden');
    return d
      ? {
          summary: d.querySelector('summary').textContent,
          open: d.open,
          bodyVisible: d.querySelector('pre').checkVisibility()
        }
      : null;
  }, C.show);
  await shot(C.show, '07_show_0_folded');
  await page.click(
    `.jp-Notebook .jp-Cell >> nth=${C.show} >> details.mgpu-hidden summary`
  );
  const opened = await page.evaluate(i => {
    const d = window.jupyterapp.shell.currentWidget.content.widgets[
      i
    ].node.querySelector('details.mgpu-hidden');
    return {
      open: d.open,
      bodyVisible: d.querySelector('pre').checkVisibility(),
      body: d.querySelector('pre').innerText
    };
  }, C.show);
  await shot(C.show, '08_show_0_opened');
  step('show', { folded, details, opened });

  // 7. a failure on rank 1: the one-line error, then that rank's whole traceback folded under it
  await run(C.fail);
  const failed = await cellOutputs(C.fail);
  const tbSelector = 'details.mgpu-traceback';
  const tbDetails = await page.evaluate(
    ([i, sel]) => {
      const d =
        window.jupyterapp.shell.currentWidget.content.widgets[
          i
        ].node.querySelector(sel);
      return d
        ? {
            summary: d.querySelector('summary').textContent,
            open: d.open,
            bodyVisible: d.querySelector('pre').checkVisibility()
          }
        : null;
    },
    [C.fail, tbSelector]
  );
  await shot(C.fail, '09_traceback_folded');
  await page.click(
    `.jp-Notebook .jp-Cell >> nth=${C.fail} >> ${tbSelector} summary`
  );
  const tbOpened = await page.evaluate(
    ([i, sel]) => {
      const d =
        window.jupyterapp.shell.currentWidget.content.widgets[
          i
        ].node.querySelector(sel);
      return {
        open: d.open,
        bodyVisible: d.querySelector('pre').checkVisibility(),
        body: d.querySelector('pre').innerText,
        coloured: d.querySelectorAll('pre span[style*="color"]').length
      };
    },
    [C.fail, tbSelector]
  );
  await shot(C.fail, '10_traceback_opened');
  step('fail', { outputs: failed, details: tbDetails, opened: tbOpened });

  // 8. no output wider than its cell
  step('layout', await notebookLayout(page, { areaScroll: true }));

  await run(C.shutdown);
  const shutdown = (await cellOutputs(C.shutdown)).text;
  await page.evaluate(() =>
    window.jupyterapp.shell.currentWidget.sessionContext.shutdown()
  );
  step('done', { shutdown, consoleErrors });
} catch (err) {
  await reportError(err, page, '99_failure.png', consoleErrors);
  await shutdownKernel(page);
} finally {
  await close();
}
