// JupyterLab's debugger panel across the ranks, in a real JupyterLab (Debian's Chromium, playwright-core):
// the debugger switched on for the notebook, a breakpoint set by clicking the gutter of a %%mgpu cell, the
// cell run; the panel's call stack shows the stopped rank's frame in the cell, its variables are that
// rank's; continue shows the other rank, continue again finishes the cell. Then, on the same kernel: a
// breakpoint clicked in the gutter of a .py file open in the file editor (a module the next cell imports)
// stops the ranks in that file, the debug console evaluates on the shown rank, and the "Continue all ranks"
// button finishes the cell; a condition `rank == 1` stops rank 1 alone; a breakpoint clicked in a
// %mgpu_run script's file stops each rank there in turn. Called by tests/browser/test_debug_panel_in_lab.py
// with {url, token, notebook, artifacts, chromium, profile, cells: {name: index}, files: {name: path}};
// prints one JSON line per step.
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
const { page, consoleErrors, close } = await openBrowser({
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

// Wait until the call stack shows a frame of a rank other than `not` and the variables list `name` (a loaded
// page lists a function's variable groups before its variables); returns what the panel shows.
async function stoppedRank(not, name) {
  await page.waitForFunction(
    ([n, want]) =>
      Array.from(
        document.querySelectorAll('.jp-DebuggerCallstackFrame-name')
      ).some(
        f =>
          f.textContent.startsWith('rank ') &&
          (n === null || !f.textContent.startsWith(`rank ${n} `))
      ) &&
      Array.from(document.querySelectorAll('.jp-DebuggerVariables-name')).some(
        v => v.textContent === want
      ),
    [not, name],
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
    const cell = window.mgpuNotebook.content.widgets[i];
    return {
      count: cell.model.executionCount,
      text: cell.node.querySelector('.jp-Cell-outputArea')?.innerText ?? ''
    };
  }, index);

// Run cell `index` of the notebook without making it current: JupyterLab's debugger, when a notebook becomes
// current, sends the breakpoints it knows again, each as its line alone (a condition sent as the panel
// sends one would be gone); a person's click into a cell does the same.
async function runNotebookCell(index, wait = true) {
  await page.evaluate(
    async ([i, w]) => {
      window.mgpuNotebook.content.activeCellIndex = i;
      const done = window.jupyterapp.commands.execute('notebook:run-cell', {
        activate: false
      });
      if (w) {
        await done;
      }
    },
    [index, wait]
  );
}

// Wait until cell `index` has run to its end and the kernel is idle; returns its output.
async function cellFinished(index) {
  await page.waitForFunction(
    i =>
      window.mgpuNotebook.content.widgets[i].model.executionCount !== null &&
      window.mgpuNotebook.sessionContext.session.kernel.status === 'idle',
    index,
    { timeout: STEP_TIMEOUT, polling: 200 }
  );
  return cellOutput(index);
}

// Open `file` in the file editor, split to the right of the notebook, and click the breakpoint gutter of
// its line `line`, as a person sets one; returns the breakpoints the debugger's panel then lists.
async function fileBreakpoint(file, line) {
  const marks = await page.$$('.jp-DebuggerBreakpoint');
  await page.evaluate(async f => {
    await window.jupyterapp.commands.execute('docmanager:open', {
      path: f,
      options: { mode: 'split-right' }
    });
  }, file);
  await page.waitForSelector(
    `${await fileEditor(file)} .cm-breakpoint-gutter`,
    {
      timeout: STEP_TIMEOUT
    }
  );
  // A second after a file's text last changed (opening it sets it), JupyterLab's EditorHandler sends the
  // breakpoints its gutter shows then (EDITOR_CHANGED_TIMEOUT, node_modules/@jupyterlab/debugger); a click
  // within that second whose setBreakpoints reply is still on its way is not in the gutter yet, and that
  // send removes it again (run M: the script's mark shown, then gone, and no rank stopped). A person reads
  // the file before clicking in it.
  await page.waitForTimeout(1500);
  await clickGutter(file, line);
  await page.waitForFunction(
    n => document.querySelectorAll('.jp-DebuggerBreakpoint').length > n,
    marks.length,
    { timeout: STEP_TIMEOUT }
  );
  return page.$$eval('.jp-DebuggerBreakpoint', e => e.map(x => x.textContent));
}

// A selector of the file editor showing `file` (its document widget, marked), brought to the front as a
// click on its tab does: where a rank stops in a file, JupyterLab's debugger opens a read-only view of it
// in a tab of its own, in front of the editor.
async function fileEditor(file) {
  await page.waitForFunction(
    f => {
      const widget = Array.from(window.jupyterapp.shell.widgets('main')).find(
        w => w.context?.path === f && w.content?.editor
      );
      if (widget) {
        widget.node.setAttribute('data-mgpu-file', f);
        window.jupyterapp.shell.activateById(widget.id);
      }
      return !!widget && widget.isVisible;
    },
    file,
    { timeout: STEP_TIMEOUT }
  );
  return `[data-mgpu-file="${file}"]`;
}

// A click in the breakpoint gutter of the file editor showing `file`, at its line `line`.
async function clickGutter(file, line) {
  const spot = await page
    .locator(await fileEditor(file))
    .evaluate((node, n) => {
      const number = Array.from(
        node.querySelectorAll('.cm-lineNumbers .cm-gutterElement')
      ).find(e => e.textContent.trim() === String(n));
      const gutter = node
        .querySelector('.cm-breakpoint-gutter')
        .getBoundingClientRect();
      const box = number.getBoundingClientRect();
      return { x: gutter.x + gutter.width / 2, y: box.y + box.height / 2 };
    }, line);
  await page.mouse.click(spot.x, spot.y);
}

// The line the debugger highlights in the file editor showing `file` (the stopped rank's line), or null.
const fileHighlight = async file =>
  page.$eval(
    await fileEditor(file),
    node =>
      node.querySelector('.jp-DebuggerEditor-highlight')?.textContent ?? null
  );

// Type `expression` in the debug console (opened once) and run it; returns the value it shows.
async function evaluateInConsole(expression) {
  if (!(await page.$('.jp-DebugConsole'))) {
    await page.evaluate(async () => {
      await window.jupyterapp.commands.execute('debugger:evaluate');
    });
  }
  const prompt = '.jp-DebugConsole .jp-CodeConsole-promptCell .cm-content';
  const outputs =
    '.jp-DebugConsole .jp-CodeConsole-content .jp-OutputArea-output';
  await page.waitForSelector(prompt, { timeout: STEP_TIMEOUT });
  const before = (await page.$$(outputs)).length;
  await page.click(prompt);
  await page.keyboard.type(expression);
  await page.keyboard.press('Shift+Enter');
  await page.waitForFunction(
    ([sel, n]) => document.querySelectorAll(sel).length > n,
    [outputs, before],
    { timeout: STEP_TIMEOUT }
  );
  return page.$$eval(outputs, e => e[e.length - 1].textContent.trim());
}

// The "Continue all ranks" button of the callstack panel's toolbar: its tooltip, enabled, the button before it.
const continueAllButton = () =>
  page.evaluate(() => {
    const b = document.querySelector(
      '#jp-debugger-sidebar [data-command="mgpu:debugger-continue-all-ranks"]'
    );
    return b
      ? {
          title: b.getAttribute('title'),
          enabled: !b.disabled && b.getAttribute('aria-disabled') !== 'true',
          nextTo:
            b
              .closest('.jp-Toolbar-item')
              ?.previousElementSibling?.querySelector('[data-command]')?.dataset
              .command ?? null
        }
      : null;
  });

// A breakpoint with a condition, sent to the kernel as the panel sends its breakpoints (a DAP
// setBreakpoints for the file's path). JupyterLab 4.6's gutter has no condition editor: its
// updateBreakpoints sends each breakpoint's line alone (node_modules/@jupyterlab/debugger, service.ts).
const setCondition = (file, line, condition) =>
  page.evaluate(
    async ([f, l, c]) => {
      const kernel = window.mgpuNotebook.sessionContext.session.kernel;
      const future = kernel.requestDebug({
        type: 'request',
        seq: 0,
        command: 'setBreakpoints',
        arguments: {
          source: { path: f },
          breakpoints: c ? [{ line: l, condition: c }] : [],
          sourceModified: false
        }
      });
      return (await future.done).content.success;
    },
    [file, line, condition]
  );

try {
  await openNotebook(page, STEP_TIMEOUT);
  await page.evaluate(() => {
    window.mgpuNotebook = window.jupyterapp.shell.currentWidget;
  });
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
  const first = await stoppedRank(null, 'secret');
  await shot('01_stopped');
  report('first', { ...first, layout: await notebookLayout(page) });

  await page.evaluate(() =>
    window.jupyterapp.commands.execute('debugger:continue')
  );
  const second = await stoppedRank(first.rank, 'secret');
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

  // a breakpoint clicked in a .py file open in the file editor; the next cell imports it: both ranks stop
  const F = cfg.files;
  report('file_breakpoint', {
    breakpoints: await fileBreakpoint(F.helper, 3),
    button: await continueAllButton()
  });
  await runNotebookCell(C.helper, false);
  const inFile = await stoppedRank(null, 'out');
  const fileStop = {
    ...inFile,
    highlight: await fileHighlight(F.helper),
    button: await continueAllButton()
  };
  await shot('03_stopped_in_file'); // before the console: JupyterLab empties the variables after an evaluate
  report('file_stop', { ...fileStop, value: await evaluateInConsole('out') });
  await page.click(
    '#jp-debugger-sidebar [data-command="mgpu:debugger-continue-all-ranks"]'
  );
  report('continued_all', {
    ...(await cellFinished(C.helper)),
    button: await continueAllButton(),
    frames: (await panelView()).frames
  });

  // the gutter's mark taken off, then `rank == 1` on that line (sent as the panel sends breakpoints: its
  // gutter has no condition editor): rank 1 alone stops
  await clickGutter(F.helper, 3);
  await page.waitForFunction(
    () => document.querySelectorAll('.jp-DebuggerBreakpoint').length === 1,
    null,
    { timeout: STEP_TIMEOUT }
  );
  const sent = await setCondition(cfg.paths.helper, 3, 'rank == 1');
  await runNotebookCell(C.helper, false);
  const onlyRank = await stoppedRank(null, 'out');
  const conditional = {
    sent,
    ...onlyRank,
    value: await evaluateInConsole('out')
  };
  await shot('04_conditional');
  await page.evaluate(() =>
    window.jupyterapp.commands.execute('debugger:continue')
  );
  report('conditional', { ...conditional, ...(await cellFinished(C.helper)) });
  await setCondition(cfg.paths.helper, 3, null);

  // a breakpoint clicked in a %mgpu_run script's file: each rank stops there in turn
  const scriptMarks = await fileBreakpoint(F.script, 4);
  await runNotebookCell(C.script, false);
  const s1 = await stoppedRank(null, 'value');
  const highlight = await fileHighlight(F.script);
  await shot('05_stopped_in_script');
  const script1 = { ...s1, highlight, value: await evaluateInConsole('value') };
  await page.evaluate(() =>
    window.jupyterapp.commands.execute('debugger:continue')
  );
  const s2 = await stoppedRank(s1.rank, 'value');
  const script2 = { ...s2, value: await evaluateInConsole('value') };
  await page.evaluate(() =>
    window.jupyterapp.commands.execute('debugger:continue')
  );
  report('script', {
    breakpoints: scriptMarks,
    stops: [script1, script2],
    ...(await cellFinished(C.script))
  });
  await page.evaluate(() =>
    window.jupyterapp.shell.activateById(window.mgpuNotebook.id)
  );
  report('layout', await notebookLayout(page));
  await runNotebookCell(C.shutdown);
  report('done', {
    shutdown: (await cellOutput(C.shutdown)).text,
    consoleErrors
  });
  await shutdownKernel(page);
} catch (err) {
  await shutdownKernel(page);
  await reportError(err, page, 'error.png', consoleErrors);
} finally {
  await close();
}
