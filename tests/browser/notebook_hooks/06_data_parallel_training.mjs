// 06 training: what each live metrics plot shows once the notebook has run — its header line and
// how many points each rank's loss line has.
export async function after({ page, report }) {
  report(
    'plots',
    await page.evaluate(() => {
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
            points: (loss.data || []).map(t => (t.x || []).length)
          });
        }
      }
      return { plots };
    })
  );
}
