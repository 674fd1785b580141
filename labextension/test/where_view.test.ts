/**
 * @jest-environment jsdom
 */
/** A card's stack view: the payload checked, the tree drawn indented with its ranks, the "Where" button. */
jest.mock('@lumino/widgets', () => {
  const g = globalThis as any;
  if (g.DragEvent === undefined) {
    g.DragEvent = class DragEvent extends MouseEvent {};
  }
  return jest.requireActual('@lumino/widgets');
});

import { MgpuPanel } from '../src/panel';
import { drawWhere, parseWhere } from '../src/where_view';
import { cluster } from './samples';

const tree = {
  time: 1700000000,
  ranks: 'ranks 0–15 (16)',
  lines: [
    [0, 'line 9 of the cell', 'ranks 0–15 (16)'],
    [1, 'line 3 of step()  ·  waiting in all_reduce #8', 'ranks 0–14 (15)'],
    [1, 'line 5 of load()  ·  running', 'rank 15']
  ]
};

describe('the stack view', () => {
  it('checks the payload and names a bad line', () => {
    expect(parseWhere(tree)).toEqual(tree);
    expect(() => parseWhere({ ...tree, lines: [[0, 'x']] })).toThrow(
      /where line 0 is not \[depth, label, ranks\]/
    );
    expect(() => parseWhere(null)).toThrow(/no time or ranks/);
  });

  it('draws a line per node, indented by depth, each with its ranks', () => {
    const node = document.createElement('div');
    node.hidden = true;
    drawWhere(node, parseWhere(tree));
    expect(node.hidden).toBe(false);
    const lines = Array.from(node.querySelectorAll('.jp-mgpu-where-line'));
    expect(
      lines.map(l => l.querySelector('.jp-mgpu-where-ranks')!.textContent)
    ).toEqual(['ranks 0–15 (16)', 'ranks 0–14 (15)', 'rank 15']);
    expect(lines.map(l => (l as HTMLElement).style.paddingLeft)).toEqual([
      '0em',
      '0.9em',
      '0.9em'
    ]);
    expect(node.querySelector('.jp-mgpu-where-caption')!.textContent).toMatch(
      /^where ranks 0–15 \(16\) are, at /
    );
  });

  it("the card's Where button asks for its cluster and shows the tree, or the error in one line", async () => {
    const where = jest
      .fn()
      .mockResolvedValueOnce(parseWhere(tree))
      .mockRejectedValueOnce(new Error('no such cluster'));
    const panel = new MgpuPanel({
      insertInit: jest.fn(),
      stopCluster: jest.fn(),
      togglePause: jest.fn(),
      where
    });
    document.body.appendChild(panel.node);
    const c = cluster('7-abcd0001', 16);
    panel.render({
      type: 'snapshot',
      time: 1,
      clusters: [c],
      devices: { time: 1, host: 'h', source: 'clusters', devices: [] },
      interval: 1,
      paused: false
    });
    const button = panel.node.querySelector<HTMLButtonElement>(
      '.jp-mgpu-where-button'
    )!;
    const view = panel.node.querySelector<HTMLElement>('.jp-mgpu-where')!;
    expect(view.hidden).toBe(true);
    button.click();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(where).toHaveBeenCalledWith(
      expect.objectContaining({ cluster_id: '7-abcd0001' })
    );
    expect(view.querySelectorAll('.jp-mgpu-where-line')).toHaveLength(3);
    button.click();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(view.textContent).toBe('where the ranks are: no such cluster');
    panel.dispose();
  });
});
