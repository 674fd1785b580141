import {
  continueAllArguments,
  pathOnDisk,
  RANK_THREADS,
  stoppedRanks
} from '../src/rank_threads';

describe('the ranks as debug threads', () => {
  it('finds the stopped ranks among the threads, the kernel own ones left out', () => {
    expect(stoppedRanks(new Set([RANK_THREADS + 3, 1, RANK_THREADS]))).toEqual([
      0, 3
    ]);
    expect(stoppedRanks([1, 7])).toEqual([]);
  });

  it('asks for every rank: DAP singleThread false, marked allRanks', () => {
    // JupyterLab's own Continue sends {threadId} alone, which the kernel takes for the shown rank
    expect(continueAllArguments(RANK_THREADS + 1)).toEqual({
      threadId: RANK_THREADS + 1,
      singleThread: false,
      allRanks: true
    });
  });
});

describe('a file open in the editor, as the kernel sees it', () => {
  it('joins the server root and the path in JupyterLab', () => {
    expect(pathOnDisk('/home/me/work/', 'pkg/helper.py')).toBe(
      '/home/me/work/pkg/helper.py'
    );
    expect(pathOnDisk('~/work', 'helper.py')).toBe('~/work/helper.py');
    expect(pathOnDisk('/', 'helper.py')).toBe('/helper.py');
    expect(pathOnDisk('', 'helper.py')).toBe('helper.py');
  });
});
