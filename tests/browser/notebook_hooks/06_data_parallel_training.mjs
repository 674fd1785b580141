// 06 training: while the DDP cell trains, how many points the DDP plot's loss figure draws each time the page
// changes (a MutationObserver, not round trips a busy machine makes rare) and how tall the plot is then: it
// must grow live and never collapse while a redraw is drawn. Then what each live metrics plot shows once the
// notebook has run — its header line and
// how many points each rank's loss line has. A figure still being drawn (plotly renders a view
// asynchronously, later on a loaded machine) is waited for, up to 20 s; one still empty then is
// reported with what its element holds, so a failure says whether it was never drawn or wiped.
import { watchCell } from '../chromium.mjs';

export async function during({ page, report, cellIndex }) {
  const cell = await cellIndex('plot.stop()          #');
  const seen = await watchCell(
    page,
    cell,
    node => {
      const graph = node.querySelector('.js-plotly-plot');
      const box = node.querySelector('.widget-vbox');
      if (!graph || !graph.data) {
        return null;
      }
      const points = (graph.data[0].x || []).length;
      return { points, height: Math.round(box.getBoundingClientRect().height) };
    },
    { observe: { attributes: true } }
  );
  report('live', { seen });
}

export async function after({ page, report }) {
  const read = () =>
    page.evaluate(() => {
      const plots = [];
      for (const cell of window.jupyterapp.shell.currentWidget.content
        .widgets) {
        for (const box of cell.node.querySelectorAll('.widget-vbox')) {
          const graphs = box.querySelectorAll('.js-plotly-plot');
          if (!graphs.length) {
            continue;
          }
          const header =
            box.querySelector('.widget-html-content')?.innerText.trim() ?? null;
          const loss = graphs[0];
          plots.push({
            header,
            points: (loss.data || []).map(t => (t.x || []).length),
            graphs: graphs.length,
            drawn: Boolean(loss._fullLayout),
            children: loss.childElementCount,
            connected: loss.isConnected
          });
        }
      }
      return { plots };
    });
  let seen = await read();
  for (
    const end = Date.now() + 20000;
    Date.now() < end && seen.plots.some(p => !p.points.length);
    seen = await read()
  ) {
    await page.waitForTimeout(250);
  }
  report('plots', seen);
}
