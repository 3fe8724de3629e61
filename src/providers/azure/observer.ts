/**
 * What the Azure clients report as they call the provider, for metrics: every HTTP answer (or its absence) at the
 * transport, below the SDKs, and every retry retry.ts decides. Token requests of the credentials are not included.
 */
import type { Context, Middleware } from '@microsoft/microsoft-graph-client';
import type { PipelinePolicy } from '@azure/core-rest-pipeline';
import { statusLabel } from '../../telemetry/telemetry.ts';
import type { MountMetrics } from '../../core/framework.ts';
import { CLOUD_PROVIDER_REQUESTS, CLOUD_PROVIDER_RETRIES, type ProviderApi } from '../../telemetry/families.ts';
import type { RetryOptions, RetryReason } from './retry.ts';

export interface ProviderObserver {
  /** An HTTP answer's status, or undefined when none came (a network failure, a timeout). */
  answered(api: ProviderApi, status: number | undefined): void;
  retried(api: ProviderApi, reason: RetryReason): void;
}

/** The observer a mount records into. */
export function providerMetrics(metrics: MountMetrics): ProviderObserver {
  const requests = metrics.counter(CLOUD_PROVIDER_REQUESTS);
  const retries = metrics.counter(CLOUD_PROVIDER_RETRIES);
  return {
    answered: (api, status) => requests.inc({ api, status: status === undefined ? 'network_error' : statusLabel(status) }),
    retried: (api, reason) => retries.inc({ api, reason }),
  };
}

/** For the Graph client's middleware chain, before its HTTP handler. */
export function graphObserver(observer: ProviderObserver): Middleware {
  let next: Middleware | undefined;
  return {
    async execute(context: Context) {
      try {
        await next!.execute(context);
      } catch (err) {
        observer.answered('graph', undefined);
        throw err;
      }
      observer.answered('graph', context.response?.status);
    },
    setNext(middleware: Middleware) {
      next = middleware;
    },
  };
}

/** For an ARM client's pipeline (`additionalPolicies`): an error status is an answer; a thrown request is none. */
export function armObserver(observer: ProviderObserver, api: ProviderApi): PipelinePolicy {
  return {
    name: 'strongroomProviderObserver',
    async sendRequest(request, next) {
      try {
        const response = await next(request);
        observer.answered(api, response.status);
        return response;
      } catch (err) {
        observer.answered(api, (err as { statusCode?: number }).statusCode);
        throw err;
      }
    },
  };
}

/** Retry options that also tell the observer of each retry. */
export function observedRetry(retry: RetryOptions | undefined, observer: ProviderObserver | undefined, api: ProviderApi): RetryOptions {
  if (!observer) return retry ?? {};
  return {
    ...retry,
    onRetry: (event) => {
      observer.retried(api, event.reason);
      retry?.onRetry?.(event);
    },
  };
}
