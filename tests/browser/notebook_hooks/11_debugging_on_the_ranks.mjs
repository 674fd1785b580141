// 11_debugging_on_the_ranks: a person at the notebook's input box. Each pdb prompt that appears gets
// the next answer, typed and sent with Enter, as a reader following the notebook would type them.
const ANSWERS = [
  // %mgpu_debug --rank 2: the failure's frame, then the cell's, then quit
  'p xs',
  'u',
  'p readings[rank]',
  'q',
  // pending.get(): rank 2 at its breakpoint steps over one line, prints its value, goes on
  'n',
  'p mean',
  'c',
  // every rank stopped: cast to all of them, ask once, let them all go on
  ':all',
  'p scale',
  'c',
  // eight ranks, one bad: the tree, a cast, one question for all, then all go on
  ':where',
  ':all',
  'p lr, loss',
  'c'
];

export async function during({ page, report, cellIndex, shotCell }) {
  const typed = [];
  const noblock = await cellIndex('%%mgpu --noblock');
  let lineUnder = null; // what the --noblock cell shows while rank 2 waits at its prompt
  while (!(await page.evaluate(() => window.__mgpuDone))) {
    const box = await page.$('input.jp-Stdin-input');
    if (box && typed.length === 4 && lineUnder === null) {
      lineUnder = await page.evaluate(
        k =>
          window.jupyterapp.shell.currentWidget.content.widgets[
            k
          ].node.querySelector('.jp-OutputArea')?.innerText ?? '',
        noblock
      );
      await shotCell(noblock, '02b_noblock_line');
    }
    if (box && typed.length < ANSWERS.length) {
      const prompt = await box.evaluate(
        el =>
          el.closest('.jp-Stdin')?.querySelector('.jp-Stdin-prompt')
            ?.textContent ?? null
      );
      const answer = ANSWERS[typed.length];
      await box.fill(answer);
      await box.press('Enter');
      typed.push({ prompt, answer });
      await page.waitForFunction(el => !el.isConnected || el.disabled, box, {
        timeout: 10000
      });
    } else {
      await page.waitForTimeout(100);
    }
  }
  report('stdin', { typed, lineUnder });
}
