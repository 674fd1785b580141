// JupyterLab's debugger panel across the ranks, in a real JupyterLab (Debian's Chromium, playwright-core):
// the debugger switched on for the notebook, a breakpoint set by clicking the gutter of a %%mgpu cell, the
// cell run; the panel's call stack shows the stopped rank's frame in the cell, its variables are that
// rank's; continue shows the other rank, continue again finishes the cell. Called by
// tests/browser/test_debug_panel_in_lab.py with {url, token, notebook, artifacts, chromium, profile,
// cells: {name: index}}; prints one JSON line per step.
import path from 'node:path';
import {
  cfg,
  report,
  openBrowser,
  openNotebook,
  runCell,
  reportError,
  notebookLayout,
  shutdownKernel
} from './chromium.mjs';

const STEP_TIMEOUT = 90000;
const C = cfg.cells;
const { context, page, consoleErrors } = await openBrowser({
  viewport: { width: 1400, height: 900 }
});
const shot = name =>
  page.screenshot({ path: path.join(cfg.artifacts, `${name}.png`) });

// What the debugger panel shows: the call stack's frames and the variables' names and values.
const panelView = () =>
  page.evaluate(() => ({
    frames: Array.from(
      document.querySelectorAll('.jp-DebuggerCallstackFrame')
    ).map(f => ({
      name:
        f.querySelector('.jp-DebuggerCallstackFrame-name')?.textContent ?? '',
      location:
        f.querySelector('.jp-DebuggerCallstackFrame-location')?.textContent ??
        ''
    })),
    variables: Array.from(
      document.querySelectorAll('.jp-DebuggerVariables-name')
    ).map(n => {
      const row = n.parentElement;
      return {
        name: n.textContent,
        value:
          row.querySelector('.jp-DebuggerVariables-detail')?.textContent ?? ''
      };
    })
  }));

// Wait until the call stack shows a frame of a rank other than `not`; returns what the panel shows.
async function stoppedRank(not = null) {
  await page.waitForFunction(
    n =>
      Array.from(
        document.querySelectorAll('.jp-DebuggerCallstackFrame-name')
      ).some(
        f =>
          f.textContent.startsWith('rank ') &&
          (n === null || !f.textContent.startsWith(`rank ${n} `))
      ) && document.querySelectorAll('.jp-DebuggerVariables-name').length > 0,
    not,
    { timeout: STEP_TIMEOUT, polling: 200 }
  );
  await page.waitForTimeout(300); // the variables of that frame settle
  const view = await panelView();
  const rank = Number(
    view.frames.find(f => f.name.startsWith('rank ')).name.split(' ')[1]
  );
  return { rank, ...view };
}

const cellOutput = index =>
  page.evaluate(i => {
    const cell = window.jupyterapp.shell.currentWidget.content.widgets[i];
    return {
      count: cell.model.executionCount,
      text: cell.node.querySelector('.jp-Cell-outputArea')?.innerText ?? ''
    };
  }, index);

try {
  await openNotebook(page, STEP_TIMEOUT);
  await runCell(page, C.init);
  // switch the debugger on for this notebook (the bug in its toolbar) and show its panel
  await page.click('.jp-DebuggerBugButton');
  await page.waitForFunction(
    () =>
      document
        .querySelector('.jp-DebuggerBugButton')
        ?.closest('[aria-pressed], .jp-ToolbarButtonComponent, button')
        ?.getAttribute('aria-pressed') === 'true' ||
      document.querySelector('.jp-DebuggerBugButton[aria-pressed="true"]'),
    null,
    { timeout: STEP_TIMEOUT }
  );
  await page.evaluate(() =>
    window.jupyterapp.shell.activateById('jp-debugger-sidebar')
  );
  await page.waitForSelector('.jp-DebuggerCallstack', {
    timeout: STEP_TIMEOUT
  });
  // a breakpoint on line 3 of the %%mgpu cell: a click in its gutter, as a person sets one
  await page.evaluate(i => {
    window.jupyterapp.shell.currentWidget.content.activeCellIndex = i;
  }, C.cell);
  await page.waitForFunction(
    i =>
      window.jupyterapp.shell.currentWidget.content.widgets[
        i
      ].node.querySelector('.cm-breakpoint-gutter'),
    C.cell,
    { timeout: STEP_TIMEOUT }
  );
  const spot = await page.evaluate(i => {
    const cell = window.jupyterapp.shell.currentWidget.content.widgets[i];
    const number = Array.from(
      cell.node.querySelectorAll('.cm-lineNumbers .cm-gutterElement')
    ).find(e => e.textContent.trim() === '3');
    const gutter = cell.node
      .querySelector('.cm-breakpoint-gutter')
      .getBoundingClientRect();
    const line = number.getBoundingClientRect();
    return { x: gutter.x + gutter.width / 2, y: line.y + line.height / 2 };
  }, C.cell);
  await page.mouse.click(spot.x, spot.y);
  await page.waitForSelector('.jp-DebuggerBreakpoint', {
    timeout: STEP_TIMEOUT
  });
  const breakpoints = await page.$$eval('.jp-DebuggerBreakpoint-line', e =>
    e.map(x => x.textContent)
  );
  report('breakpoint', { breakpoints });

  await runCell(page, C.cell, false);
  const first = await stoppedRank();
  await shot('01_stopped');
  report('first', { ...first, layout: await notebookLayout(page) });

  await page.evaluate(() =>
    window.jupyterapp.commands.execute('debugger:continue')
  );
  const second = await stoppedRank(first.rank);
  await shot('02_other_rank');
  report('second', second);

  await page.evaluate(() =>
    window.jupyterapp.commands.execute('debugger:continue')
  );
  await page.waitForFunction(
    i =>
      window.jupyterapp.shell.currentWidget.content.widgets[i].model
        .executionCount !== null &&
      window.jupyterapp.shell.currentWidget.sessionContext.session.kernel
        .status === 'idle',
    C.cell,
    { timeout: STEP_TIMEOUT, polling: 200 }
  );
  report('finished', await cellOutput(C.cell));
  await runCell(page, C.shutdown);
  report('done', {
    shutdown: (await cellOutput(C.shutdown)).text,
    consoleErrors
  });
  await shutdownKernel(page);
} catch (err) {
  await shutdownKernel(page);
  await reportError(err, page, 'error', consoleErrors);
} finally {
  await context.close();
}
