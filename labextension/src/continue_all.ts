/**
 * jupyter-mgpu:continue-all-ranks: a "Continue all ranks" button in the toolbar of the debugger's
 * callstack panel, next to JupyterLab's Continue (which goes on acting on the rank it shows). It sends
 * one DAP `continue` marked for all ranks (rank_threads.ts); the kernel lets every stopped rank go on.
 * Both tokens are optional: without JupyterLab's debugger, nothing is added.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { IDebugger, IDebuggerSidebar } from '@jupyterlab/debugger';
import type { Toolbar } from '@jupyterlab/ui-components';
import {
  CommandToolbarButton,
  fastForwardIcon
} from '@jupyterlab/ui-components';
import type { Widget } from '@lumino/widgets';

import {
  continueAllArguments,
  RANK_THREADS,
  stoppedRanks
} from './rank_threads';

export const CONTINUE_ALL = 'mgpu:debugger-continue-all-ranks';

/** The callstack panel's toolbar of JupyterLab's debugger sidebar (`Debugger.Sidebar.callstack`). */
function callstackToolbar(
  sidebar: IDebugger.ISidebar | null
): Toolbar<Widget> | null {
  const callstack = (sidebar as { callstack?: { toolbar?: Toolbar<Widget> } })
    ?.callstack;
  return callstack?.toolbar ?? null;
}

export const continueAllRanks: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-mgpu:continue-all-ranks',
  description:
    'A "Continue all ranks" button in the debugger panel: every rank stopped at a breakpoint goes on',
  autoStart: true,
  optional: [IDebugger, IDebuggerSidebar],
  activate: (
    app: JupyterFrontEnd,
    service: IDebugger | null,
    sidebar: IDebugger.ISidebar | null
  ) => {
    if (!service) {
      return;
    }
    const ranks = () => stoppedRanks(service.model.stoppedThreads);
    app.commands.addCommand(CONTINUE_ALL, {
      label: 'Continue all ranks',
      caption: 'Continue all ranks: every rank stopped at a breakpoint goes on',
      icon: fastForwardIcon,
      isEnabled: () => !!service.session?.isStarted && ranks().length > 0,
      execute: async () => {
        const shown = ranks();
        if (!service.session || shown.length === 0) {
          return;
        }
        const reply = await service.session.sendRequest(
          'continue',
          continueAllArguments(RANK_THREADS + shown[0])
        );
        if (!reply.success) {
          console.warn(`jupyter-mgpu: continue all ranks: ${reply.message}`);
        }
      }
    });
    const changed = () => app.commands.notifyCommandChanged(CONTINUE_ALL);
    service.eventMessage.connect(changed);
    service.sessionChanged.connect(changed);
    callstackToolbar(sidebar)?.insertAfter(
      'continue',
      'mgpu-continue-all-ranks',
      new CommandToolbarButton({
        commands: app.commands,
        id: CONTINUE_ALL,
        label: ''
      })
    );
  }
};
