/** The status-bar item speaks of the current notebook's kernel, and says what it counts. */
import { ICurrentNotebook, isCurrent, ownerLabel } from '../src/cluster_owner';
import { DeviceEntry, SnapshotMessage } from '../src/payloads';
import { statusText, statusTitle } from '../src/status_text';
import { cluster } from './samples';

const GiB = 2 ** 30;

const snapshot = (
  clusters = [cluster('1-a', 2)],
  gpus: DeviceEntry[] = [],
  paused = false
): SnapshotMessage => ({
  type: 'snapshot',
  time: 1000,
  interval: 1,
  paused,
  clusters,
  devices: {
    time: 1000,
    host: 'node1',
    source: gpus.length ? 'nvml' : 'clusters',
    devices: gpus
  }
});

const gpu = (i: number, used: number): DeviceEntry => ({
  id: `cuda:${i}`,
  kind: 'cuda',
  index: i,
  name: 'Test GPU',
  used_bytes: used,
  total_bytes: 80 * GiB,
  utilization: null,
  cluster_id: null,
  rank: null,
  own_bytes: null,
  other_users_bytes: null
});

const here: ICurrentNotebook = { kernelId: 'k-here', path: 'work/here.ipynb' };
const mine = (id: string, world: number, over = {}) =>
  cluster(id, world, {
    kernel_id: 'k-here',
    notebook: 'work/here.ipynb',
    used_bytes: 3 * GiB,
    total_bytes: 8 * GiB,
    ...over
  });
const theirs = (id: string, world: number) =>
  cluster(id, world, { kernel_id: 'k-there', notebook: 'work/there.ipynb' });

describe('whose cluster', () => {
  it('is the kernel the server names, else the notebook path', () => {
    expect(isCurrent(mine('1-a', 2), here)).toBe(true);
    expect(isCurrent(theirs('2-b', 2), here)).toBe(false);
    // a kernel id decides even when the path is the same (an older kernel of the same notebook)
    expect(
      isCurrent(
        cluster('3-c', 2, { kernel_id: 'k-old', notebook: here.path }),
        here
      )
    ).toBe(false);
    // no kernel id (a kernel the server does not run, an older server): the path
    expect(isCurrent(cluster('4-d', 2, { notebook: here.path }), here)).toBe(
      true
    );
    expect(isCurrent(cluster('5-e', 2, { notebook: 'x.ipynb' }), here)).toBe(
      false
    );
    expect(isCurrent(mine('1-a', 2), null)).toBe(false);
    expect(ownerLabel(mine('1-a', 2), here)).toBe('this notebook');
    expect(ownerLabel(theirs('2-b', 2), here)).toBe('another notebook');
    expect(ownerLabel(cluster('6-f', 2, { notebook: null }), here)).toBe(
      'another kernel'
    );
  });
});

describe('statusText', () => {
  it('before %mgpu_init here, counts the other notebooks clusters as theirs, never as devices', () => {
    // the defect: "mgpu 2× cpu" while this notebook had no cluster, counting another notebook's
    const text = statusText(snapshot([theirs('2-b', 2)]), here);
    expect(text).toBe('mgpu – · 1 cluster in another notebook');
    expect(text).not.toMatch(/×/);
    expect(
      statusText(snapshot([theirs('2-b', 2), theirs('3-c', 4)]), here)
    ).toBe('mgpu – · 2 clusters in other notebooks');
    expect(statusText(snapshot([]), here)).toBe('mgpu –');
    expect(statusText(snapshot([theirs('2-b', 2)]), null)).toBe(
      'mgpu – · 1 cluster in another notebook'
    );
  });

  it("shows this notebook's cluster only, whatever else runs", () => {
    const snap = snapshot([theirs('2-b', 8), mine('1-a', 4), theirs('3-c', 2)]);
    expect(statusText(snap, here)).toBe('mgpu 4× cpu · 3.0 GiB / 8.0 GiB');
    expect(
      statusText(snapshot([mine('1-a', 4, { status: 'starting' })]), here)
    ).toBe('mgpu 4× cpu · 3.0 GiB / 8.0 GiB · starting');
    // switching to the other notebook switches the item
    const there: ICurrentNotebook = {
      kernelId: 'k-there',
      path: 'work/there.ipynb'
    };
    expect(statusText(snap, there)).toBe('mgpu 10× cpu · 3.9 KiB / 15.6 KiB');
  });

  it("on a GPU host without a cluster here, shows the host's GPUs; paused and not yet connected", () => {
    const snap = snapshot([theirs('2-b', 2)], [gpu(0, 40 * GiB), gpu(1, 0)]);
    expect(statusText(snap, here)).toBe('mgpu 2× cuda · 40.0 GiB / 160.0 GiB');
    expect(statusText(snapshot([], [], true), here)).toBe('mgpu – (paused)');
    expect(statusText(snapshot([mine('1-a', 2)], [], true), here)).toBe(
      'mgpu 2× cpu · 3.0 GiB / 8.0 GiB (paused)'
    );
    expect(statusText(null, here)).toBe('mgpu …');
  });

  it('says in its tooltip what each figure counts', () => {
    const title = statusTitle(
      snapshot([mine('1-a', 4), theirs('2-b', 2)], [gpu(0, 40 * GiB)]),
      here
    );
    expect(title.split('\n')).toEqual([
      'This notebook (here.ipynb): cluster 1-a, 4× cpu · 3.0 GiB / 8.0 GiB.',
      "The host's GPUs (NVML, every process): 1× cuda · 40.0 GiB / 80.0 GiB.",
      'Not counted here: 1 cluster in another notebook: there.ipynb (2× cpu).',
      'Click to open the Multi-GPU panel.'
    ]);
    expect(statusTitle(snapshot([]), here).split('\n')[0]).toBe(
      'This notebook (here.ipynb) has no cluster: %mgpu_init starts one.'
    );
    expect(statusTitle(snapshot([]), null).split('\n')[0]).toMatch(
      /^No notebook is open/
    );
    const many = statusTitle(
      snapshot(Array.from({ length: 6 }, (_, i) => theirs(`${i}-x`, 2))),
      here
    );
    expect(many).toContain('Not counted here: 6 clusters in other notebooks:');
    expect(many).toContain(', …');
  });
});
