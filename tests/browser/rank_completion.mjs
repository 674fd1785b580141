// Tab in a %%mgpu cell in a real JupyterLab (Debian's Chromium, playwright-core): the completer lists
// names only rank 0 has; the same Tab in a plain cell does not. Called by
// tests/browser/test_rank_completion_in_lab.py with {url, token, notebook, artifacts, chromium, profile}; the
// notebook's cells are: %load_ext + %mgpu_init 2, a %%mgpu cell defining the names, an empty cell to type
// into, %mgpu_shutdown. Prints one JSON line per step and a final {"step": "done"}.
import path from 'node:path';
import {
  cfg,
  report,
  openBrowser,
  openNotebook,
  runCell,
  reportError
} from './chromium.mjs';

const STEP_TIMEOUT = 90000;

const { page, consoleErrors, close } = await openBrowser({
  viewport: { width: 1280, height: 800 }
});

// Put the cursor in cell `index`, type `lines` (Enter between them) and press Tab; what the completer shows
// within `wait` ms.
async function typeAndTab(index, lines, wait) {
  await page.evaluate(i => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    nb.activeCellIndex = i;
    nb.activeCell.model.sharedModel.setSource('');
    nb.mode = 'edit';
    nb.activeCell.editor.focus();
  }, index);
  for (const [n, line] of lines.entries()) {
    if (n) {
      await page.keyboard.press('Enter');
    }
    await page.keyboard.type(line);
  }
  const start = Date.now();
  await page.keyboard.press('Tab');
  const shown = await page
    .waitForSelector('.jp-Completer:not(.lm-mod-hidden) .jp-Completer-item', {
      timeout: wait
    })
    .then(() => true)
    .catch(() => false);
  const items = await page.evaluate(() =>
    Array.from(
      document.querySelectorAll(
        '.jp-Completer:not(.lm-mod-hidden) .jp-Completer-item'
      )
    ).map(li => li.dataset.value ?? li.textContent)
  );
  const source = await page.evaluate(
    i =>
      window.jupyterapp.shell.currentWidget.content.widgets[
        i
      ].model.sharedModel.getSource(),
    index
  );
  return { shown, items, source, ms: Date.now() - start };
}

try {
  await openNotebook(page, STEP_TIMEOUT);
  await runCell(page, 0);
  await runCell(page, 1);
  const defined = await page.evaluate(
    () =>
      window.jupyterapp.shell.currentWidget.content.widgets[1].node.innerText
  );
  report('started', { defined });

  const mgpu = await typeAndTab(2, ['%%mgpu', 'only_on_r'], 10000);
  await page.screenshot({
    path: path.join(cfg.artifacts, '01_tab_in_mgpu_cell.png')
  });
  await page.keyboard.press('Escape');
  report('mgpu', mgpu);

  const plain = await typeAndTab(2, ['only_on_r'], 3000); // the kernel answers [] at once: no popup ever
  await page.screenshot({
    path: path.join(cfg.artifacts, '02_tab_in_plain_cell.png')
  });
  await page.keyboard.press('Escape');
  report('plain', plain);

  await page.evaluate(() => {
    window.jupyterapp.shell.currentWidget.content.mode = 'command';
  });
  await runCell(page, 3);
  const shutdown = await page.evaluate(
    () =>
      window.jupyterapp.shell.currentWidget.content.widgets[3].node.innerText
  );
  await page.evaluate(() =>
    window.jupyterapp.shell.currentWidget.sessionContext.shutdown()
  );
  report('done', { shutdown, consoleErrors });
} catch (err) {
  await reportError(err, page, '99_failure.png', consoleErrors);
} finally {
  await close();
}
