/**
 * jupyter-mgpu:file-breakpoints: a breakpoint gutter in every `.py` file open in JupyterLab's file editor
 * while the debugger is on, its breakpoints sent to the debugged kernel with the file's path on disk. The
 * ranks of a %%mgpu cell or a %mgpu_run script then stop in that file (jupyter_mgpu/magics/debug_panel.py),
 * and the file shows the stopped line. JupyterLab's own file handler gives a gutter only to a file with a
 * kernel of its own (a console for the editor), and names its breakpoints by the file's text, as a cell's.
 */
import {
  ILabShell,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { PageConfig } from '@jupyterlab/coreutils';
import { Debugger, IDebugger } from '@jupyterlab/debugger';
import type { Widget } from '@lumino/widgets';

import { pathOnDisk } from './rank_threads';

type HandlerOptions = ConstructorParameters<typeof Debugger.EditorHandler>[0];

/** What a file editor's document widget offers, as far as this plugin needs it. */
interface IFileWidget extends Widget {
  context: { path: string };
  content: {
    editor: NonNullable<ReturnType<HandlerOptions['getEditor']>>;
    model: { sharedModel: HandlerOptions['src'] };
  };
}

function asPythonFile(widget: Widget): IFileWidget | null {
  const w = widget as unknown as Partial<IFileWidget>;
  const editor = w.content?.editor;
  const path = w.context?.path;
  return editor && path?.endsWith('.py') && w.content?.model?.sharedModel
    ? (w as IFileWidget)
    : null;
}

export const fileBreakpoints: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-mgpu:file-breakpoints',
  description:
    'Breakpoints in .py files open in the editor, for the ranks that run them',
  autoStart: true,
  optional: [IDebugger, ILabShell],
  activate: (
    app: JupyterFrontEnd,
    service: IDebugger | null,
    labShell: ILabShell | null
  ) => {
    if (!service) {
      return;
    }
    // each file's handler, and the debug session's connection it was made for (a handler acts on clicks
    // only while that connection is the debugged one: another notebook debugged, it is made again)
    const handlers = new Map<
      IFileWidget,
      { handler: Debugger.EditorHandler; connection: string }
    >();
    const ownKernel = (path: string) =>
      Array.from(app.serviceManager.sessions.running()).some(
        s => s.path === path
      );
    const sync = () => {
      const files = service.isStarted
        ? Array.from(app.shell.widgets('main'))
            .map(asPythonFile)
            .filter((w): w is IFileWidget => !!w && !ownKernel(w.context.path))
        : [];
      const connection = service.session?.connection?.id ?? '';
      for (const [widget, made] of handlers) {
        if (!files.includes(widget) || made.connection !== connection) {
          made.handler.dispose();
          handlers.delete(widget);
        }
      }
      for (const widget of files) {
        if (handlers.has(widget)) {
          continue;
        }
        const editor = widget.content.editor;
        const handler = new Debugger.EditorHandler({
          debuggerService: service,
          editorReady: () => Promise.resolve(editor),
          getEditor: () => (widget.isDisposed ? null : editor),
          path: pathOnDisk(
            PageConfig.getOption('serverRoot'),
            widget.context.path
          ),
          src: widget.content.model.sharedModel
        });
        handlers.set(widget, { handler, connection });
        widget.disposed.connect(sync);
      }
    };
    labShell?.currentChanged.connect(sync);
    labShell?.layoutModified.connect(sync);
    service.sessionChanged.connect(sync);
    service.model.titleChanged.connect(sync);
    service.model.breakpoints.restored.connect(sync); // after the connection changed
    sync();
  }
};
