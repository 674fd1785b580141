// 12_many_ranks: while Run All runs, count the bytes the page receives on its websockets and when each
// code cell starts (the first cell without an execution count, recorded in the page whenever a count is
// set, so a cell of half a second is not missed between two polls of a busy machine), so the test knows
// what each cell sent and how long it took; with the Multi-GPU sidebar open, read its 32-rank card once
// the cluster runs.
import path from 'node:path';

export async function during({ page, context, report, cfg }) {
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.enable');
  let received = 0;
  const frames = []; // [Date.now(), bytes received so far] at each frame
  cdp.on('Network.webSocketFrameReceived', e => {
    const data = e.response.payloadData ?? '';
    // binary frames come base64-encoded: count the bytes they carry
    received +=
      e.response.opcode === 2 ? Math.floor((data.length * 3) / 4) : data.length;
    frames.push([Date.now(), received]);
  });
  const bytesAt = t => {
    let n = 0;
    for (const [when, total] of frames) {
      if (when > t) {
        break;
      }
      n = total;
    }
    return n;
  };
  await page.evaluate(() => {
    const cells = window.jupyterapp.shell.currentWidget.content.widgets;
    const running = () => {
      const i = cells.findIndex(
        c => c.model.type === 'code' && c.model.executionCount === null
      );
      return i < 0
        ? { index: -1 }
        : { index: i, source: cells[i].model.sharedModel.getSource() };
    };
    window.__mgpuMarks = [{ ...running(), t: Date.now() }];
    for (const c of cells) {
      c.model.stateChanged?.connect((_, change) => {
        if (change.name !== 'executionCount') {
          return;
        }
        const now = running();
        if (now.index !== window.__mgpuMarks.at(-1).index) {
          window.__mgpuMarks.push({ ...now, t: Date.now() });
        }
      });
    }
  });
  await page.click('.jp-mgpu-status');
  await page.waitForSelector('#jupyter-mgpu-panel:not(.lm-mod-hidden)', {
    timeout: 10000
  });
  let sidebar = null;
  while (!(await page.evaluate(() => window.__mgpuDone))) {
    if (!sidebar) {
      sidebar = await page.evaluate(() => {
        const card = Array.from(
          document.querySelectorAll('#jupyter-mgpu-panel .jp-mgpu-cluster')
        ).find(
          c =>
            c.dataset.status === 'running' &&
            c.querySelectorAll('.jp-mgpu-rank').length >= 32
        );
        if (!card) {
          return null;
        }
        const panel = document.querySelector('#jupyter-mgpu-panel');
        const box = panel.getBoundingClientRect();
        const stop = card
          .querySelector('.jp-mgpu-stop')
          .getBoundingClientRect();
        const states = Array.from(card.querySelectorAll('.jp-mgpu-rank')).map(
          r => ({
            id: r.querySelector('.jp-mgpu-rank-id')?.textContent ?? '',
            state: r.querySelector('.jp-mgpu-state')?.textContent ?? ''
          })
        );
        return {
          ranks: states,
          stopInView: stop.top >= box.top && stop.bottom <= box.bottom,
          panelHeight: box.height,
          overflow: Array.from(panel.querySelectorAll('*'))
            .filter(
              el =>
                el.scrollWidth > el.clientWidth + 1 &&
                getComputedStyle(el).overflowX === 'visible'
            )
            .map(el => el.className)
            .slice(0, 5)
        };
      });
      if (sidebar) {
        await page.screenshot({
          path: path.join(cfg.artifacts, 'sidebar_32_ranks.png')
        });
      }
    }
    await page.waitForTimeout(50);
  }
  const marks = (await page.evaluate(() => window.__mgpuMarks)).map(m => ({
    ...m,
    bytes: bytesAt(m.t)
  }));
  marks.push({ index: -1, t: Date.now(), bytes: received });
  report('traffic', { marks, sidebar });
}

// the all-gather cell: how its figure looks at the size shown (title, width, smallest text), then its
// schedule player stepped to the end with its ▶ button, its height and counter read at every step (it
// must keep one height: a player that resized each frame made the page jump)
async function allGather({ page, report, cellIndex }) {
  const i = await cellIndex('%%time\n%mgpu_collective all_gather');
  await page.waitForFunction(
    k =>
      window.jupyterapp.shell.currentWidget.content.widgets[
        k
      ].node.querySelector('.mgpu-player svg') &&
      window.jupyterapp.shell.currentWidget.content.widgets[
        k
      ].node.querySelector('.mgpu-collective svg'),
    i,
    { timeout: 20000 }
  );
  const look = await page.evaluate(k => {
    const node = window.jupyterapp.shell.currentWidget.content.widgets[k].node;
    const fig = node.querySelector('.mgpu-collective svg');
    const scale = fig.getBoundingClientRect().width / fig.viewBox.baseVal.width;
    const sizes = Array.from(
      node.querySelectorAll('.mgpu-collective svg text, .mgpu-player svg text')
    )
      .map(t => parseFloat(getComputedStyle(t).fontSize))
      .filter(s => s > 0);
    node.querySelector('.mgpu-player').scrollIntoView();
    return {
      title: fig.querySelector(':scope > text').textContent, // not a strip drawn once in <defs>
      width: fig.viewBox.baseVal.width,
      smallestText: Math.min(...sizes) * scale
    };
  }, i);
  const read = () =>
    page.evaluate(k => {
      const node =
        window.jupyterapp.shell.currentWidget.content.widgets[k].node;
      return {
        height: node.querySelector('.mgpu-player').getBoundingClientRect()
          .height,
        counter: node.querySelector('.mgpu-player-counter').textContent,
        steps: parseInt(node.querySelector('.mgpu-player-slider').max, 10)
      };
    }, i);
  const first = await read();
  const heights = [first.height];
  const counters = [first.counter];
  const cell = (await page.$$('.jp-Notebook .jp-Cell'))[i];
  const forward = await cell.$('.mgpu-player-step-forward');
  const stepStart = Date.now();
  for (let s = 1; s <= first.steps; s++) {
    await forward.click();
    await page.waitForFunction(
      ([k, n]) =>
        window.jupyterapp.shell.currentWidget.content.widgets[k].node
          .querySelector('.mgpu-player-counter')
          .textContent.startsWith(`step ${n} `),
      [i, s],
      { timeout: 10000, polling: 20 }
    );
    const now = await read();
    heights.push(now.height);
    counters.push(now.counter);
  }
  const perStep = (Date.now() - stepStart) / 1000 / Math.max(1, first.steps);
  report('allGather', { look, steps: first.steps, heights, counters, perStep });
}

// the cell of a figure per rank: its one output pages the 32 figures four at a time; read the first page,
// step once with ▶, read again (labels, drawn plotly figures, and whether any lies past the cell's edge)
export async function after(ctx) {
  await allGather(ctx);
  await figures(ctx);
}

async function figures({ page, report, cellIndex }) {
  const i = await cellIndex('%%mgpu\nimport plotly');
  const read = () =>
    page.evaluate(k => {
      const cell = window.jupyterapp.shell.currentWidget.content.widgets[k];
      const area = cell.node.querySelector('.jp-OutputArea');
      const edge = area.getBoundingClientRect().right;
      const plots = Array.from(area.querySelectorAll('.js-plotly-plot'));
      return {
        outputs: cell.model.outputs
          .toJSON()
          .filter(
            o =>
              !(
                o.data &&
                Object.keys(o.data).join() === 'text/plain' &&
                o.data['text/plain'] === ''
              )
          ).length, // less a wait's emptied line

        labels: Array.from(area.querySelectorAll('.mgpu-rank-label')).map(
          l => l.textContent
        ),
        plots: plots.length,
        page: area
          .querySelector('select')
          ?.selectedOptions[0]?.textContent.replace(/\u00a0/g, ' '),
        past: plots.filter(p => p.getBoundingClientRect().right > edge + 1)
          .length
      };
    }, i);
  await page.waitForFunction(
    k =>
      window.jupyterapp.shell.currentWidget.content.widgets[
        k
      ].node.querySelectorAll('.js-plotly-plot').length > 0,
    i,
    { timeout: 20000 }
  );
  const first = await read();
  const cell = (await page.$$('.jp-Notebook .jp-Cell'))[i];
  await (await cell.$$('.jupyter-widgets button'))[1].click();
  await page.waitForFunction(
    k =>
      Array.from(
        window.jupyterapp.shell.currentWidget.content.widgets[
          k
        ].node.querySelectorAll('.mgpu-rank-label')
      ).some(l => l.textContent === 'rank 4'),
    i,
    { timeout: 20000 }
  );
  await page.waitForTimeout(500); // the page's figures draw
  report('figures', { first, second: await read() });
}
