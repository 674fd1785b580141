/**
 * REST calls of the server extension (under the server's base URL, so it works behind JupyterHub).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { parseStop, StopPayload } from './payloads';
import { IWherePayload, parseWhere } from './where_view';

/** A request to `/mgpu/api/clusters/<id>[/<more>]`; its JSON body, or an Error with the server's message. */
async function clusterRequest(
  clusterId: string,
  more: string[],
  init: RequestInit,
  settings: ServerConnection.ISettings
): Promise<unknown> {
  const url = URLExt.join(
    settings.baseUrl,
    'mgpu',
    'api',
    'clusters',
    encodeURIComponent(clusterId),
    ...more
  );
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  let body: unknown = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!response.ok) {
    const message =
      body && typeof (body as { message?: unknown }).message === 'string'
        ? (body as { message: string }).message
        : `${response.status} ${response.statusText}`;
    throw new Error(message);
  }
  return body;
}

/** `DELETE /mgpu/api/clusters/<id>`: stop one of this user's clusters; throws with the server's message. */
export async function stopCluster(
  clusterId: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<StopPayload> {
  return parseStop(
    await clusterRequest(clusterId, [], { method: 'DELETE' }, settings)
  );
}

/** `GET /mgpu/api/clusters/<id>/where`: every rank's stack now, as one tree; throws with the server's message. */
export async function fetchWhere(
  clusterId: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<IWherePayload> {
  return parseWhere(
    await clusterRequest(clusterId, ['where'], { method: 'GET' }, settings)
  );
}
