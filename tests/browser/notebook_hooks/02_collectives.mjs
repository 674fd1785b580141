// 02_collectives: text inside the "receives nothing" boxes stays inside them, and the drawn values of
// the split collectives (reduce_scatter, scatter) are big enough to read.
export async function after({ page, report, cellIndex }) {
  const split = [
    await cellIndex('%mgpu_collective reduce_scatter --op sum --shape'),
    await cellIndex('%mgpu_collective scatter')
  ];
  report(
    'collectives',
    await page.evaluate(cells => {
      const nb = window.jupyterapp.shell.currentWidget.content.widgets;
      const boxes = Array.from(
        document.querySelectorAll('.jp-Notebook g.mgpu-nothing')
      ).map(g => {
        const box = g.querySelector('rect').getBoundingClientRect();
        const texts = Array.from(g.querySelectorAll('text')).map(t =>
          t.getBoundingClientRect()
        );
        return {
          inside: texts.every(
            t =>
              t.left >= box.left - 1 &&
              t.right <= box.right + 1 &&
              t.top >= box.top - 1 &&
              t.bottom <= box.bottom + 1
          ),
          text: g.textContent
        };
      });
      // the smallest value cell drawn in each split collective's before/after figure, in screen pixels
      const smallest = cells.map(i => {
        const svg = nb[i].node.querySelector('svg.mgpu-collective-svg');
        const sizes = Array.from(
          svg.querySelectorAll('rect[stroke="#dddddd"]')
        ).map(r => r.getBoundingClientRect().width);
        return Math.min(...sizes);
      });
      return { boxes, smallest };
    }, split)
  );
}
