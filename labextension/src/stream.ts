/**
 * The websocket client of `/mgpu/api/stream`: sets the rate, pauses, reconnects after a drop, and
 * closes cleanly when disposed (the server then ends its loop for this page).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { parseStreamMessage, SnapshotMessage, StreamRequest } from './payloads';

export class MgpuStream {
  constructor(settings?: ServerConnection.ISettings) {
    this._settings = settings ?? ServerConnection.makeSettings();
  }

  get snapshot(): SignalLike<SnapshotMessage> {
    return this._snapshot;
  }

  get errors(): ISignal<this, string> {
    return this._errors;
  }

  get latest(): SnapshotMessage | null {
    return this._latest;
  }

  get interval(): number {
    return this._interval;
  }

  get paused(): boolean {
    return this._paused;
  }

  /** Open the socket (idempotent). */
  start(): void {
    if (this._disposed || this._ws) {
      return;
    }
    let url = URLExt.join(this._settings.wsUrl, 'mgpu', 'api', 'stream');
    const token = this._settings.token;
    if (this._settings.appendToken && token) {
      url += `?token=${encodeURIComponent(token)}`;
    }
    const ws = new this._settings.WebSocket(url);
    this._ws = ws;
    ws.onopen = () => {
      this._retry = 0;
      this.send({
        type: 'configure',
        interval: this._interval,
        paused: this._paused
      });
    };
    ws.onmessage = (ev: MessageEvent) => {
      try {
        const msg = parseStreamMessage(String(ev.data));
        if (msg.type === 'error') {
          this._errors.emit(msg.message);
        } else {
          this._latest = msg;
          this._snapshot.emit(msg);
        }
      } catch (err) {
        this._errors.emit(String(err));
      }
    };
    ws.onclose = () => {
      this._ws = null;
      if (!this._disposed) {
        const delay = Math.min(30000, 500 * 2 ** this._retry++);
        this._timer = window.setTimeout(() => {
          this._timer = null;
          this.start();
        }, delay);
      }
    };
  }

  /** Change the refresh interval (seconds) and pause state; sent at once when connected. */
  configure(interval: number, paused: boolean): void {
    this._interval = interval;
    this._paused = paused;
    this.send({ type: 'configure', interval, paused });
  }

  /** Ask for a snapshot now (after a stop, for instance). */
  refresh(): void {
    this.send({ type: 'refresh' });
  }

  send(msg: StreamRequest): void {
    if (this._ws && this._ws.readyState === WebSocket.OPEN) {
      this._ws.send(JSON.stringify(msg));
    }
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    this._disposed = true;
    if (this._timer !== null) {
      window.clearTimeout(this._timer);
      this._timer = null;
    }
    if (this._ws) {
      this._ws.onclose = null;
      this._ws.close();
      this._ws = null;
    }
    Signal.clearData(this);
  }

  private _settings: ServerConnection.ISettings;
  private _ws: WebSocket | null = null;
  private _timer: number | null = null;
  private _retry = 0;
  private _disposed = false;
  private _interval = 1;
  private _paused = false;
  private _latest: SnapshotMessage | null = null;
  private _snapshot = new Signal<this, SnapshotMessage>(this);
  private _errors = new Signal<this, string>(this);
}

type SignalLike<T> = ISignal<MgpuStream, T>;
