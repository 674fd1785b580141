/**
 * jupyter-mgpu:plugin: the Multi-GPU sidebar, the status-bar item, their commands and settings; and
 * jupyter-mgpu:continue-all-ranks, the debugger panel's "Continue all ranks" button (continue_all.ts); and
 * jupyter-mgpu:file-breakpoints, breakpoints in .py files for the ranks (file_breakpoints.ts).
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import {
  INotebookTracker,
  NotebookActions,
  NotebookPanel
} from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';

import { stopCluster } from './api';
import { continueAllRanks } from './continue_all';
import { fileBreakpoints } from './file_breakpoints';
import { ICurrentNotebook } from './cluster_owner';
import { initCommand } from './format';
import { MgpuPanel } from './panel';
import { ClusterInfo } from './payloads';
import { MgpuStatus } from './statusbar';
import { MgpuStream } from './stream';

const PLUGIN_ID = 'jupyter-mgpu:plugin';

namespace CommandIDs {
  export const open = 'mgpu:open-panel';
  export const insertInit = 'mgpu:insert-init';
  export const stopCluster = 'mgpu:stop-cluster';
}

const ICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24">' +
  '<g class="jp-icon3" fill="#616161">' +
  '<rect x="2" y="3" width="9" height="8" rx="1"/><rect x="13" y="3" width="9" height="8" rx="1"/>' +
  '<rect x="2" y="13" width="9" height="8" rx="1"/><rect x="13" y="13" width="9" height="8" rx="1"/>' +
  '</g></svg>';

export const mgpuIcon = new LabIcon({
  name: 'jupyter-mgpu:icon',
  svgstr: ICON_SVG
});

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Multi-GPU sidebar and status bar for jupyter_mgpu clusters',
  autoStart: true,
  optional: [ISettingRegistry, IStatusBar, INotebookTracker, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    settingRegistry: ISettingRegistry | null,
    statusBar: IStatusBar | null,
    notebooks: INotebookTracker | null,
    restorer: ILayoutRestorer | null
  ) => {
    const stream = new MgpuStream();
    let interval = 1;
    let paused = false;

    const confirmStop = async (cluster: ClusterInfo): Promise<void> => {
      const result = await showDialog({
        title: 'Stop cluster?',
        body:
          `Stop cluster ${cluster.cluster_id} (${cluster.world_size} ranks` +
          `${cluster.notebook ? `, started by ${cluster.notebook}` : ''})? ` +
          'Its engines end and their memory is freed; the notebook needs %mgpu_init again.',
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Stop' })]
      });
      if (!result.button.accept) {
        return;
      }
      try {
        await stopCluster(cluster.cluster_id);
      } catch (err) {
        await showErrorMessage(
          'Could not stop the cluster',
          String((err as Error).message ?? err)
        );
      }
      stream.refresh();
    };

    const panel = new MgpuPanel({
      insertInit: () => void app.commands.execute(CommandIDs.insertInit),
      stopCluster: cluster => void confirmStop(cluster),
      togglePause: () => {
        paused = !paused;
        stream.configure(interval, paused);
        showPaused();
        if (settings) {
          void settings.set('paused', paused);
        }
      }
    });
    panel.title.icon = mgpuIcon;
    app.shell.add(panel, 'left', { rank: 900 });
    if (restorer) {
      restorer.add(panel, 'jupyter-mgpu-panel');
    }

    const status = new MgpuStatus(
      () => void app.commands.execute(CommandIDs.open)
    );
    if (statusBar) {
      statusBar.registerStatusItem('jupyter-mgpu:status', {
        item: status,
        align: 'left',
        rank: 50
      });
    }

    const showPaused = () => {
      panel.setPaused(paused, interval);
      status.paused = paused;
      status.render(stream.latest);
    };

    stream.snapshot.connect((_, snap) => {
      panel.render(snap);
      status.render(snap);
    });

    // the status item and the cards speak of the current notebook's kernel: follow it as the user
    // switches notebooks, and as a notebook's kernel starts, restarts or changes, or the file is renamed
    const current = (): ICurrentNotebook | null => {
      const nb = notebooks?.currentWidget ?? null;
      if (!nb) {
        return null;
      }
      return {
        kernelId: nb.sessionContext.session?.kernel?.id ?? null,
        path: nb.sessionContext.path || nb.context.path
      };
    };
    const showCurrent = () => {
      const cur = current();
      status.setCurrent(cur);
      panel.setCurrent(cur);
    };
    let followed: NotebookPanel | null = null;
    const follow = (nb: NotebookPanel | null) => {
      if (followed) {
        followed.sessionContext.kernelChanged.disconnect(showCurrent);
        followed.sessionContext.propertyChanged.disconnect(showCurrent);
      }
      followed = nb;
      if (nb) {
        nb.sessionContext.kernelChanged.connect(showCurrent);
        nb.sessionContext.propertyChanged.connect(showCurrent);
      }
      showCurrent();
    };
    notebooks?.currentChanged.connect((_, nb) => follow(nb));
    follow(notebooks?.currentWidget ?? null);
    stream.errors.connect((_, message) => panel.showError(message));

    app.commands.addCommand(CommandIDs.open, {
      label: 'Open the Multi-GPU panel',
      execute: () => app.shell.activateById(panel.id)
    });
    app.commands.addCommand(CommandIDs.insertInit, {
      label: 'Insert %mgpu_init',
      isEnabled: () => !!notebooks?.currentWidget,
      execute: () => {
        const current = notebooks?.currentWidget;
        if (!current) {
          void showErrorMessage(
            'No notebook',
            'Open a notebook first: %mgpu_init goes into its active cell.'
          );
          return;
        }
        const notebook = current.content;
        const loaded = notebook.widgets.some(cell =>
          cell.model.sharedModel.getSource().includes('load_ext jupyter_mgpu')
        );
        NotebookActions.insertBelow(notebook);
        const cell = notebook.activeCell;
        if (cell) {
          const line = initCommand(stream.latest);
          cell.model.sharedModel.setSource(
            loaded ? line : `%load_ext jupyter_mgpu\n${line}`
          );
        }
        app.shell.activateById(current.id);
      }
    });
    app.commands.addCommand(CommandIDs.stopCluster, {
      label: 'Stop a jupyter_mgpu cluster',
      execute: args => {
        const id = String(args.id ?? '');
        const cluster = stream.latest?.clusters.find(c => c.cluster_id === id);
        if (cluster) {
          return confirmStop(cluster);
        }
      }
    });

    let settings: ISettingRegistry.ISettings | null = null;
    const apply = (s: ISettingRegistry.ISettings) => {
      interval = Number(s.get('refreshRate').composite) || 1;
      paused = s.get('paused').composite === true;
      stream.configure(interval, paused);
      showPaused();
    };
    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(s => {
          settings = s;
          apply(s);
          s.changed.connect(apply);
        })
        .catch(reason =>
          console.error('jupyter-mgpu: failed to load settings', reason)
        );
    }
    stream.start();
  }
};

export default [plugin, continueAllRanks, fileBreakpoints];
